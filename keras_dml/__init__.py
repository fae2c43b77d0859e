"""keras_dml: deep metric learning for TensorFlow / Keras 3.

`import keras_dml` imports every submodule, so every serializable class (losses,
layers, models, miners, proxies, preprocessing) is registered with Keras: in a
fresh process `keras.models.load_model("runs/<run>/model.keras")` and
`model.compile(loss="keras_dml>MultiSimilarity")` work after `import keras_dml`.

The one exception is the `keras-dml` command's own process: its `--help` answers
without TensorFlow, and `keras_dml.cli` calls `import_all()` before a subcommand
runs.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

_SUBMODULES = (
    "ops",
    "weighting",
    "mining",
    "losses",
    "layers",
    "proxy_layers",
    "models",
    "momentum",
    "data",
    "datasets",
    "evaluation",
    "callbacks",
    "export",
    "plots",
    "projector",
    "regularizers",
    "backbones",
    "backup",
    "distribute",
    "index",
    "training",
    "validation",
)

# The file names of the console script (`keras-dml`, on Windows `keras-dml.exe`).
_COMMAND_NAMES = ("keras-dml", "keras-dml.exe", "keras-dml-script.py")


def import_all():
    """Imports every submodule (registering the serializable classes); returns them."""
    return {name: importlib.import_module(f"keras_dml.{name}") for name in _SUBMODULES}


def _in_command_line():
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(str(argv[0])) in _COMMAND_NAMES


def __getattr__(name):
    """In the command's process, submodules load on first use."""
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_dml.{name}")
    raise AttributeError(f"module 'keras_dml' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))


if not _in_command_line():
    import_all()
