"""The tf.data options of keras_dml's own pipelines."""

from keras_dml import backend

tf = backend.require_tensorflow("keras_dml.data's tf.data pipelines")

_STEADY = tf.data.Options()
_STEADY.autotune.enabled = False


def steady(dataset):
    """`dataset` with tf.data's autotuner off.

    On a 2-core CPU the autotuner's background work slowed about half of the
    `fit` calls of the Omniglot recipe from 60 to 106 ms a step, and half of the
    embedding passes over its test set from 1.5 to 2.55 s (benchmarks/README.md).
    Without it, `AUTOTUNE` parallelism falls back to one call per core and
    prefetching keeps its own buffer sizing.
    """
    return dataset.with_options(_STEADY)
