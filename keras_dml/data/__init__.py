"""Input pipelines for deep metric learning.

Class-balanced C x k batches, the weighted contrastive paper's batch designs
with importance weights, hard negative class mining, and the papers'
image preprocessing.
"""

from keras_dml.data.designs import (GroupDesign, RandomPairDesign, RandomPairSampler,
                                    design_batches, importance_weights)
from keras_dml.data.distributed import distributed_class_balanced_batches
from keras_dml.data.evaluation_batches import evaluation_batches
from keras_dml.data.hard_classes import (HardNegativeClassMining, HardNegativeClassSampler,
                                         hard_negative_class_batches)
from keras_dml.data.pipeline import StreamPosition, class_balanced_batches, stream_position
from keras_dml.data.preprocessing import Preprocessing, decode_image, register_normalization
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.two_view import two_view_batches
from keras_dml.data.verify import verify_images

__all__ = [
    "ClassBalancedSampler",
    "GroupDesign",
    "HardNegativeClassMining",
    "HardNegativeClassSampler",
    "RandomPairDesign",
    "RandomPairSampler",
    "StreamPosition",
    "Preprocessing",
    "class_balanced_batches",
    "decode_image",
    "design_batches",
    "distributed_class_balanced_batches",
    "evaluation_batches",
    "hard_negative_class_batches",
    "importance_weights",
    "register_normalization",
    "stream_position",
    "two_view_batches",
    "verify_images",
]
