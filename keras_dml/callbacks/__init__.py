"""Keras callbacks for deep metric learning, one module per concern.

`evaluation` (`RecallAtK`, `VerificationMetrics`: retrieval and verification metrics
in the epoch logs), `backup` (`TrainingBackup`: crash-safe, exact resume) and
`fine_tuning` (`BackboneStepScale`: a backbone warm-up and learning-rate multiplier).
Also here: `StopOnNonFinite` (`keras_dml.models`, which `DMLModel.fit` adds itself) and
`HardNegativeClassMining` (`keras_dml.data.HardNegativeClassMining`, documented there
beside the batches it steers; tf.data's).
Multi-worker backups are `keras_dml.training.distribute.BackupAndRestore`.
"""

from keras_dml.callbacks.backup import TrainingBackup
from keras_dml.callbacks.evaluation import RecallAtK, VerificationMetrics
from keras_dml.callbacks.fine_tuning import BackboneStepScale
from keras_dml.models import StopOnNonFinite

__all__ = [
    "BackboneStepScale",
    "RecallAtK",
    "StopOnNonFinite",
    "TrainingBackup",
    "VerificationMetrics",
]


def __getattr__(name):
    """`HardNegativeClassMining`, from `keras_dml.data` (where TensorFlow is installed)."""
    if name == "HardNegativeClassMining":
        from keras_dml import data

        return data.HardNegativeClassMining
    raise AttributeError(f"module 'keras_dml.callbacks' has no attribute {name!r}")
