"""keras_dml: deep metric learning for TensorFlow / Keras 3."""

import importlib

__version__ = "0.1.0"

_SUBMODULES = (
    "ops",
    "weighting",
    "mining",
    "losses",
    "layers",
    "models",
    "data",
    "datasets",
    "evaluation",
    "callbacks",
    "export",
    "plots",
    "backbones",
    "backup",
    "training",
    "validation",
)


def __getattr__(name):
    """Import submodules on first use, so `import keras_dml` stays light."""
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_dml.{name}")
    raise AttributeError(f"module 'keras_dml' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
