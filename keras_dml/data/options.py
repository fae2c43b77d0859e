"""The tf.data options of keras_dml's own pipelines."""

from keras_dml import backend

__all__ = ["steady"]

tf = backend.require_tensorflow("keras_dml.data's tf.data pipelines")

_STEADY = tf.data.Options()
_STEADY.autotune.enabled = False


def steady(dataset):
    """`dataset` with tf.data's autotuner off.

    On a small CPU the autotuner's background work makes about half of the
    `fit` calls and embedding passes markedly slower, at random
    (benchmarks/README.md, "Why training steps were slower"). Without it,
    `AUTOTUNE` parallelism falls back to one call per core and
    prefetching keeps its own buffer sizing.
    """
    return dataset.with_options(_STEADY)
