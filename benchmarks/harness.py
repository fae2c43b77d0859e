"""Shared timing harness: keras_dml and its peer, timed in the same run.

Every benchmark builds callables for one forward + backward step of each side and
hands them to `median_times`, which interleaves repetitions in a random order (so a
load spike from another process, or the after-effect of one call on the next, hits
both sides alike) and reports medians.
"""

import os
import random
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def batch(n, d, samples_per_class=4, seed=0):
    """Random embeddings (n, d) float32 and C x k labels."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) // samples_per_class
    return rng.normal(size=(n, d)).astype("float32"), labels.astype("int32")


def tf_step(loss, embeddings, labels, jit_compile=False):
    """A compiled forward + backward of a Keras loss w.r.t. the embeddings."""
    x = tf.Variable(embeddings)
    y = tf.constant(labels)

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            value = loss(y, x)
        # dense, as a backbone receives it (a loss that gathers rows gives IndexedSlices)
        return value, tf.convert_to_tensor(tape.gradient(value, x))

    return lambda: [t.numpy() for t in step()]


def tf_matmul_floor(embeddings, keys=None, jit_compile=False):
    """Forward + backward of the bare similarity matmul (the floor of any pair loss)."""
    x = tf.Variable(embeddings)
    k = None if keys is None else tf.Variable(keys)

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            other = x if k is None else k
            value = tf.reduce_sum(tf.matmul(x, other, transpose_b=True))
        return value, tape.gradient(value, x)

    return lambda: [t.numpy() for t in step()]


def torch_step(loss, embeddings, labels, miner=None, threads=None):
    """Forward + backward of a pytorch-metric-learning loss (optionally with a miner).

    With `threads`, torch runs with that many intra-op threads during the step.
    """
    import torch

    x = torch.tensor(embeddings, requires_grad=True)
    y = torch.tensor(labels, dtype=torch.long)

    def step():
        previous = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            x.grad = None
            value = loss(x, y) if miner is None else loss(x, y, miner(x, y))
            value.backward()
            return value.item()
        finally:
            torch.set_num_threads(previous)

    return step


def median_times(steps, repeats=15, warmup=3, seed=0):
    """Median wall time (s) of each named callable, repetitions interleaved.

    Each round runs every callable once, in a fresh random order: a call is slower
    right after some others (the first one after a torch call here measured ~20%
    slower), and a fixed order would charge that to the same side every time.
    """
    for step in steps.values():
        for _ in range(warmup):
            step()
    rng = random.Random(seed)
    names = list(steps)
    samples = {name: [] for name in steps}
    for _ in range(repeats):
        rng.shuffle(names)
        for name in names:
            start = time.perf_counter()
            steps[name]()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(samples[name]) for name in steps}


def limit_threads():
    """Use the same two intra-op threads for TensorFlow and torch."""
    threads = os.cpu_count() or 2
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        pass
    return threads


def print_table(rows, columns):
    """Print a Markdown table of dicts."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        cells = []
        for column in columns:
            value = row.get(column, "")
            cells.append(f"{value:.3g}" if isinstance(value, float) else str(value))
        print("| " + " | ".join(cells) + " |")
