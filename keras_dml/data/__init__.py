"""Input pipelines for deep metric learning.

Class-balanced C x k batches, the weighted contrastive paper's batch designs
with importance weights, hard negative class mining, and the papers'
image preprocessing.

The index sampler (`ClassBalancedSampler`) and the NumPy stream of in-memory
arrays (`ClassBalancedPyDataset`) run on every Keras backend without
TensorFlow; `Preprocessing` imports without it (a saved model's config holds
one) but transforms images in TensorFlow ops. `AffineJitter` (the training
shift, rotation and zoom) jitters tf.data batches in TensorFlow ops and NumPy
batches in Keras' ops of the running backend. The tf.data pipelines are
TensorFlow's: where it is not installed, using one of their names (or an image
operation of `Preprocessing`) raises a one-line
`keras_dml.backend.TensorFlowRequiredError`.
"""

import importlib
import typing

from keras_dml import backend
from keras_dml.data.arrays import ClassBalancedPyDataset
from keras_dml.data.jitter import AffineJitter
from keras_dml.data.preprocessing import Preprocessing, decode_image, register_normalization
from keras_dml.data.sampler import ClassBalancedSampler

# The tf.data pipelines: name -> module.
_TENSORFLOW_NAMES = {
    "GroupDesign": "designs",
    "RandomPairDesign": "designs",
    "RandomPairSampler": "designs",
    "design_batches": "designs",
    "design_sampler": "designs",
    "importance_weights": "designs",
    "distributed_class_balanced_batches": "distributed",
    "evaluation_batches": "evaluation_stream",
    "HardNegativeClassMining": "hard_classes",
    "HardNegativeClassSampler": "hard_classes",
    "hard_negative_class_batches": "hard_classes",
    "Stream": "stream",
    "StreamPosition": "pipeline",
    "class_balanced_batches": "pipeline",
    "stream_position": "pipeline",
    "two_view_batches": "two_view",
    "verify_images": "verify",
}

if typing.TYPE_CHECKING:  # the same names, for static readers (the API pages)
    from keras_dml.data.designs import (
        GroupDesign, RandomPairDesign, RandomPairSampler, design_batches, design_sampler,
        importance_weights,
    )
    from keras_dml.data.distributed import distributed_class_balanced_batches
    from keras_dml.data.evaluation_stream import evaluation_batches
    from keras_dml.data.hard_classes import (
        HardNegativeClassMining, HardNegativeClassSampler, hard_negative_class_batches,
    )
    from keras_dml.data.pipeline import StreamPosition, class_balanced_batches, stream_position
    from keras_dml.data.stream import Stream
    from keras_dml.data.two_view import two_view_batches
    from keras_dml.data.verify import verify_images


def __getattr__(name):
    """A tf.data name, its module imported on first use (so TensorFlow only then);
    without TensorFlow, the one-line error naming it."""
    if name not in _TENSORFLOW_NAMES:
        raise AttributeError(f"module 'keras_dml.data' has no attribute {name!r}")
    if not backend.tensorflow_installed():
        backend.require_tensorflow(f"keras_dml.data.{name} (tf.data)")
    module = importlib.import_module(f"keras_dml.data.{_TENSORFLOW_NAMES[name]}")
    return getattr(module, name)


def __dir__():
    return sorted(set(globals()) | set(_TENSORFLOW_NAMES))


__all__ = [
    "AffineJitter",
    "ClassBalancedPyDataset",
    "ClassBalancedSampler",
    "GroupDesign",
    "HardNegativeClassMining",
    "HardNegativeClassSampler",
    "Preprocessing",
    "RandomPairDesign",
    "RandomPairSampler",
    "Stream",
    "StreamPosition",
    "class_balanced_batches",
    "decode_image",
    "design_batches",
    "design_sampler",
    "distributed_class_balanced_batches",
    "evaluation_batches",
    "hard_negative_class_batches",
    "importance_weights",
    "register_normalization",
    "stream_position",
    "two_view_batches",
    "verify_images",
]
