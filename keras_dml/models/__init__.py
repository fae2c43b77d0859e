"""`DMLModel`: a Keras model whose loss sees the whole (global) batch of embeddings,
and `StopOnNonFinite`, the callback that stops its training on NaN or Inf."""

from keras_dml.models.dml_model import (
    DMLModel,
    StopOnNonFinite,
    gather_across_replicas,
    global_batch_loss,
)

__all__ = ["DMLModel", "StopOnNonFinite", "gather_across_replicas", "global_batch_loss"]


def __getattr__(name):
    """The other names of the former `keras_dml/models.py` (`NONFINITE_MESSAGE`, ...)."""
    from keras_dml.models import dml_model

    if name.startswith("__") or not hasattr(dml_model, name):
        raise AttributeError(f"module 'keras_dml.models' has no attribute {name!r}")
    return getattr(dml_model, name)
