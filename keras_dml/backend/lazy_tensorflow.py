"""`LazyTensorFlow`: the `tensorflow` module, imported when a module first uses it."""

import sys

from keras_dml.backend import require_tensorflow

__all__ = ["LazyTensorFlow"]


class LazyTensorFlow:
    """Stands for `tensorflow` in a module that must import without it.

    For modules whose objects are plain data too (e.g. `keras_dml.data.Preprocessing`,
    rebuilt from a saved model's config on any backend) but whose computations are
    TensorFlow ops: `tf = LazyTensorFlow(feature)` at module level, then `tf.image...`
    as usual. The first attribute use imports TensorFlow, or raises the one-line
    `TensorFlowRequiredError` naming `feature` where it is not installed.

    Args:
        feature: What needs TensorFlow, for the error message.
    """

    def __init__(self, feature):
        self._feature = feature

    def __getattr__(self, name):
        tf = sys.modules.get("tensorflow") or require_tensorflow(self._feature)
        return getattr(tf, name)
