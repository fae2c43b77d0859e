"""keras_dml systems for `benchmarks.worker`: each factory builds data and returns a step.

Imports TensorFlow and keras_dml only (no torch, no faiss).
"""

import os

import numpy as np
import tensorflow as tf

from benchmarks import data

_threads = int(os.environ.get("BENCH_THREADS", "0"))
if _threads:
    tf.config.threading.set_intra_op_parallelism_threads(_threads)
    tf.config.threading.set_inter_op_parallelism_threads(1 if _threads == 1 else 2)

import keras  # noqa: E402

import keras_dml  # noqa: E402
from keras_dml import evaluation  # noqa: E402


def _value_of(step):
    """Run `step` and return its value (the first output) as a float, as the torch
    steps return `loss.item()`. The gradients stay tensors, as torch leaves them in
    `.grad`: a function's outputs are computed when its call returns, and copying
    them to NumPy (0.46 ms for a 1024 x 512 gradient here) is work that a training
    step never does and the torch side does not pay. `run.outputs()` returns the
    value and the gradients (for tests)."""
    def run():
        return float(step()[0])

    run.outputs = step
    return run


def loss_step(loss, config=None, miner=None, miner_config=None, n=1024, d=512,
              samples_per_class=4, classes=None, jit_compile=False, measure_memory=False):
    """Forward + backward of `keras_dml.losses.<loss>(**config)` w.r.t. (n, d) embeddings.

    And w.r.t. the loss's own weights (proxies, class weights, a learnable margin),
    as a training step needs them and as a PML loss's backward fills them. `miner`
    names a `keras_dml.mining` class built with `miner_config`. The labels are a
    variable, as a batch's labels in training: constant labels would let graph
    optimisation fold the label masks away. With `measure_memory`, the step is not
    run during set-up, so the first call's peak is the step's own.
    """
    x_np, y_np = data.batch(n, d, samples_per_class, classes=classes)
    config = dict(config or {})
    if miner:
        config["miner"] = getattr(keras_dml.mining, miner)(**(miner_config or {}))
    loss = getattr(keras_dml.losses, loss)(**config)
    x, y = tf.Variable(x_np), tf.Variable(y_np, trainable=False)
    sources = [x]
    layer = getattr(loss, "trainable_layer", None)
    if layer is not None:
        layer.attached_to_model = True  # its weights are differentiated here (no warning)
        loss(y, x)  # builds them
        sources += layer.trainable_weights

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            value = loss(y, x)
        # dense, as a backbone receives it (a loss that gathers rows gives IndexedSlices)
        return [value] + [tf.convert_to_tensor(g) for g in tape.gradient(value, sources)]

    if measure_memory:
        return _value_of(step)
    value, gradient = step()[:2]
    return _value_of(step), {
        "value": float(value), "finite": bool(np.isfinite(gradient.numpy()).all())}


def matmul_floor(n=1024, d=512, samples_per_class=4, classes=None, keys=None, halves=False):
    """Forward + backward of the bare similarity matmul a loss of the case needs: the
    floor of that loss in TensorFlow.

    The n x n self-similarity by default; `keys`: against (keys, d) weights, with
    the gradient to both sides (a proxy or class-weight loss); `halves`: each
    row's first half against every row's second half (multiple-negatives ranking).
    """
    x = tf.Variable(data.batch(n, d, samples_per_class, classes=classes)[0])
    sources = [x]
    if keys:
        sources.append(tf.Variable(data.batch(keys, d, 1)[0]))

    def product():
        if keys:
            return tf.matmul(x, sources[1], transpose_b=True)
        if halves:
            queries, documents = tf.split(x, 2, axis=1)
            return tf.matmul(queries, documents, transpose_b=True)
        return tf.matmul(x, x, transpose_b=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(product())
        return [value] + tape.gradient(value, sources)

    return _value_of(step)


def nearest_neighbors(n=20000, d=512, k=101, leave_one_out=False, classes=5000):
    """`keras_dml.evaluation.nearest_neighbors` on clustered unit vectors, inner product."""
    x, _ = data.clustered(n, d, classes)
    gallery = None if leave_one_out else x

    def step():
        return evaluation.nearest_neighbors(x, gallery, k=k, metric="dot")

    indices, _ = step()
    return step, {"first_neighbours": indices[:20, :10].tolist()}


def retrieval_metrics(n=20000, d=512, classes=5000):
    """P@1, R-Precision and MAP@R, leave-one-out, as PML's `AccuracyCalculator` reports."""
    x, labels = data.clustered(n, d, classes, seed=1)
    metrics = ("precision@1", "r_precision", "map@r")

    def step():
        return evaluation.retrieval_metrics(x, labels, metrics=metrics)

    return step, {key: float(value) for key, value in step().items()}


def omniglot_model(seed=0):
    """The Omniglot recipe's CNN (`cnn3`: 3 x (conv 64, BN, ReLU, max-pool)), dense 128,
    L2, built by the function `keras-dml train --width 64` builds it with."""
    from keras_dml.training import build_model
    from keras_dml.training.config import TrainConfig

    return build_model(TrainConfig(width=64, embedding_dim=128, seed=seed), (28, 28, 1))


def omniglot_train(steps=50, classes_per_batch=32, samples_per_class=4, jit_compile="auto"):
    """`steps` training steps of `DMLModel.fit` on C x k Omniglot batches, MultiSimilarity."""
    x, y = data.omniglot28("background")
    model = omniglot_model()
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras_dml.losses.MultiSimilarity(), jit_compile=jit_compile)
    batches = keras_dml.data.class_balanced_batches(
        (x, y.astype("int32")), classes_per_batch, samples_per_class, seed=0)

    def step():
        return model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)

    history = step()
    return step, {"steps": steps, "loss": float(history.history["loss"][-1])}


def omniglot_evaluate(batch_size=1024, limit=None):
    """Embed the 13,180 evaluation images (the first `limit`) and compute leave-one-out metrics."""
    x, y = data.omniglot28("evaluation")
    x, y = x[:limit], y[:limit]
    model = omniglot_model()

    def step():  # keras_dml's embedding pass (RecallAtK's and the CLI's), not Keras' predict
        embeddings, _ = evaluation.embed_dataset(model, (x, y), batch_size=batch_size)
        return evaluation.retrieval_metrics(
            embeddings, y, metrics=("precision@1", "r_precision", "map@r"))

    return step, {key: float(value) for key, value in step().items()}


def sampler_epoch(classes_per_batch=90, samples_per_class=2, samples=59_551, classes=11_318,
                  per_batch=False):
    """One epoch of C x k index batches from `ClassBalancedSampler` on SOP-sized labels,
    drawn the way `class_balanced_batches` draws them (`pipeline.sampler_steps` from a
    `StreamPosition`, with keras_dml's tf.data options). `per_batch`: drawn instead as
    the stream drew them before `sampler_steps`, `sampler.batch(step)` in a parallel map
    over the steps (every batch sorting all the classes again)."""
    import warnings

    from keras_dml.data.options import steady
    from keras_dml.data.pipeline import StreamPosition, sampler_steps

    labels = data.sop_sized_labels(samples, classes)
    with warnings.catch_warnings():  # classes smaller than k are topped up with repeats
        warnings.simplefilter("ignore")
        sampler = keras_dml.data.ClassBalancedSampler(labels, classes_per_batch,
                                                      samples_per_class, seed=0)
    batches = samples // (classes_per_batch * samples_per_class)

    position = StreamPosition(0)
    steps = position.steps().map(lambda step: (step, sampler.batch(step)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True) \
        if per_batch else sampler_steps(sampler, position)
    stream = steady(steps.take(batches))

    def step():
        return list(stream.as_numpy_iterator())

    drawn = step()
    return step, {"batches": len(drawn), "batch_size": len(drawn[0][1])}
