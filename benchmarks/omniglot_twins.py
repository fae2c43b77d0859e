"""The equal-budget Omniglot step, keras_dml on TensorFlow against PML, beside plain twins.

Four sides, each a process of its own, alternated round by round on the same batches
(`omniglot_protocol.batch_order`), the same threads and the same CNN (3 x (conv 3x3 64,
BN, ReLU, max-pool), flatten, dense 128):

- `keras_dml`: the protocol's `DMLModel` (`cnn3` + `EmbeddingHead`), `MultiSimilarity`,
  fitted on the protocol's tf.data stream, as `examples/omniglot_protocol.py` trains;
- `pml`: `benchmarks/pml_omniglot.py`'s network, `MultiSimilarityLoss` + miner;
- `keras_plain`: stock Keras layers (`BatchNormalization`, `MaxPooling2D`) with a
  964-way softmax head, `SparseCategoricalCrossentropy`, the same stream and `fit`;
- `torch_plain`: the PyTorch network with the same softmax head, `CrossEntropyLoss`.

`keras_plain / torch_plain` is what the frameworks alone give on this CPU; `keras_dml /
pml` is what the libraries give. Each side reports the time of its first `--warmup`
steps (TensorFlow's tracing is in there) and of the next `--steps` steps:

    python -m benchmarks.omniglot_twins --steps 100 --rounds 2 --threads 2
    python -m benchmarks.omniglot_twins --sides keras_dml pml --threads 1
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SIDES = ("keras_dml", "pml", "keras_plain", "torch_plain")
PAIRS = (("keras_dml", "pml"), ("keras_plain", "torch_plain"))
NUM_CLASSES = 964


def _protocol():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import omniglot_protocol

    return omniglot_protocol


def _torch_side(side, x, y, threads):
    """run(order) -> seconds for the PyTorch sides."""
    import torch

    from benchmarks import pml_omniglot

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    network = pml_omniglot.build_cnn()
    if side == "pml":
        from pytorch_metric_learning import losses, miners

        model, loss, miner = network, losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner()
    else:
        model = torch.nn.Sequential(network.body, torch.nn.Linear(128, NUM_CLASSES))
        cross_entropy = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), 1e-3)
    images = torch.from_numpy(x).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(y.astype(np.int64))

    def run(order):
        start = time.perf_counter()
        for indices in order:
            index = torch.from_numpy(indices)
            batch, batch_labels = images[index], labels[index]
            outputs = model(batch)
            value = (loss(outputs, batch_labels, miner(outputs, batch_labels)) if side == "pml"
                     else cross_entropy(outputs, batch_labels))
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
            float(value.detach())
        return time.perf_counter() - start

    return run


def _plain_keras_model():
    import keras

    layers = keras.layers
    inputs = keras.Input((28, 28, 1))
    x = inputs
    for _ in range(3):
        x = layers.Conv2D(64, 3, padding="same")(x)
        x = layers.BatchNormalization(momentum=0.99, epsilon=1e-3)(x)
        x = layers.MaxPooling2D()(layers.ReLU()(x))
    x = layers.Dense(128)(layers.Flatten()(x))
    model = keras.Model(inputs, layers.Dense(NUM_CLASSES)(x))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _keras_side(side, x, y, threads, protocol):
    """run(order) -> seconds for the Keras sides (TensorFlow)."""
    protocol.set_threads(threads)
    import keras
    import tensorflow as tf

    from keras_dml.data.options import steady
    from keras_dml.losses import MultiSimilarity

    keras.utils.set_random_seed(0)
    if side == "keras_dml":
        model = protocol.build_cnn()
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=MultiSimilarity(),
                      jit_compile=False)
    else:
        model = _plain_keras_model()
    images, labels = tf.constant(x), tf.constant(y)

    def gather(indices):
        return tf.gather(images, indices), tf.gather(labels, indices)

    def run(order):
        stream = steady(tf.data.Dataset.from_tensor_slices(order).map(gather).prefetch(2))
        start = time.perf_counter()
        model.fit(stream, verbose=0)
        return time.perf_counter() - start

    return run


def time_side(side, steps, warmup, threads):
    """{"warmup_s", "step_ms"}: `side`'s first `warmup` steps, then ms a step over `steps`."""
    protocol = _protocol()
    x, y, _, _ = protocol.load_data()
    order = protocol.batch_order(y, 32, 4, warmup + steps, 0)
    run = (_keras_side(side, x, y, threads, protocol) if side.startswith("keras")
           else _torch_side(side, x, y, threads))
    return {"warmup_s": run(order[:warmup]), "step_ms": 1000 * run(order[warmup:]) / steps}


def measure(sides, steps, warmup, threads, rounds):
    """{side: [its figures, one a round]}: every side once a round, each in its own process;
    the order of the sides reverses every other round."""
    results = {side: [] for side in sides}
    for round_ in range(rounds):
        for side in (sides if round_ % 2 == 0 else sides[::-1]):
            command = [sys.executable, "-m", "benchmarks.omniglot_twins", "--worker", side,
                       "--steps", str(steps), "--warmup", str(warmup), "--threads", str(threads)]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONPATH": ROOT})
            if done.returncode != 0:
                tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"side {side} failed: {tail}")
            row = json.loads(done.stdout.strip().splitlines()[-1])
            results[side].append({**row, "load": os.getloadavg()[0]})
    return results


def table(results, steps, warmup, threads, cpu):
    """Markdown: each side's median step and warm-up, then each pair's ratio of step times
    (median and range over the rounds, below 1: the Keras side is faster)."""
    lines = [f"{steps} steps of 32 x 4 after {warmup}, {threads} thread(s) a side, {cpu}.", "",
             "| side | ms a step, median [range] | first steps (s) | load |",
             "| --- | --- | --- | --- |"]
    for side, rows in results.items():
        times = [row["step_ms"] for row in rows]
        loads = [row["load"] for row in rows]
        lines.append(f"| {side} | {statistics.median(times):.0f} [{min(times):.0f}-"
                     f"{max(times):.0f}] | {statistics.median(r['warmup_s'] for r in rows):.1f}"
                     f" | {min(loads):.1f}-{max(loads):.1f} |")
    for keras_side, torch_side in PAIRS:
        if keras_side in results and torch_side in results:
            ratios = [a["step_ms"] / b["step_ms"]
                      for a, b in zip(results[keras_side], results[torch_side])]
            lines.append(f"\n{keras_side} / {torch_side}: {statistics.median(ratios):.2f} "
                         f"[{min(ratios):.2f}-{max(ratios):.2f}]")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", nargs="+", choices=SIDES, default=list(SIDES))
    parser.add_argument("--steps", type=int, default=100, help="timed steps a side and round")
    parser.add_argument("--warmup", type=int, default=20, help="steps before the timed ones")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for flag in ("steps", "warmup", "threads", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1, got {getattr(args, flag)}")
    if args.worker:
        print(json.dumps(time_side(args.worker, args.steps, args.warmup, args.threads)))
        return 0
    from benchmarks.__main__ import cpu_model

    results = measure(args.sides, args.steps, args.warmup, args.threads, args.rounds)
    print(table(results, args.steps, args.warmup, args.threads, cpu_model()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
