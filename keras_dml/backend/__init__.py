"""The few places where keras_dml's code differs by Keras backend.

Everything else in the package is written in `keras.ops` and runs on TensorFlow, JAX
and PyTorch alike. Code that needs one backend, or TensorFlow itself (tf.data,
SavedModel export, `tf.distribute`), asks here instead of importing it at module level,
so that `import keras_dml` works on a machine without TensorFlow.

Submodules: `gradients` (the engine's VJP through its matrix; plain autodiff for
tests), `primitives` (scatters, sorts, gathers, shapes, XLA, control dependencies,
run-time assertions), `layers` (the kernels of the fused batch norm and the one-channel
convolution), `trainer` (`DMLModel`'s steps of the running backend), `augmentation`
(a random Keras layer on NumPy batches, seeded by step), `lazy_tensorflow` (TensorFlow imported on
first use). One folder per backend, with the same file names in each: `tensorflow/`,
`jax/` and `torch/` hold `trainer.py` (the train step) and `layers.py` (the layers'
kernels); `tensorflow/row_blocks.py` holds the `tf.TensorArray` blocks of
`keras_dml.losses.row_blocks_tensorflow`.
"""

import importlib
import importlib.util

import keras

__all__ = [
    "export_advice",
    "is_tensorflow",
    "name",
    "require_tensorflow",
    "require_tensorflow_backend",
    "tensorflow_installed",
    "TensorFlowBackendRequiredError",
    "TensorFlowRequiredError",
]


class TensorFlowRequiredError(ImportError):
    """A TensorFlow-only feature was used where TensorFlow is not installed."""


class TensorFlowBackendRequiredError(ValueError):
    """A feature that traces the model in TensorFlow (SavedModel export) was used while
    Keras runs on another backend."""


def export_advice():
    """How to export a model trained on JAX or PyTorch: one sentence."""
    return ("save it (model.save('model.keras'), as keras-dml train does) and export the "
            "file with KERAS_BACKEND=tensorflow keras-dml export RUN (a run folder or a "
            ".keras file)")


def require_tensorflow_backend(feature):
    """Raises a one-line `TensorFlowBackendRequiredError` naming `feature` unless Keras
    runs on TensorFlow."""
    if not is_tensorflow():
        raise TensorFlowBackendRequiredError(
            f"{feature} traces the model in TensorFlow, and Keras runs on "
            f"{name()} here: {export_advice()}.")


def name():
    """The running Keras backend: "tensorflow", "jax" or "torch"."""
    return keras.backend.backend()


def is_tensorflow():
    """True when Keras runs on TensorFlow."""
    return name() == "tensorflow"


def tensorflow_installed():
    """True when `import tensorflow` would succeed (without importing it)."""
    return importlib.util.find_spec("tensorflow") is not None


def require_tensorflow(feature):
    """The `tensorflow` module, or a one-line `TensorFlowRequiredError` naming `feature`.

    For what stays TensorFlow's whatever the Keras backend: tf.data pipelines, image
    decoding, SavedModel / TF Serving export and `tf.distribute`.
    """
    try:
        return importlib.import_module("tensorflow")
    except ImportError as error:
        raise TensorFlowRequiredError(
            f"{feature} needs TensorFlow, which is not installed here: "
            f"pip install 'keras-dml[tensorflow]' (Keras backend: {name()}).") from error
