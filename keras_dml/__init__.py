"""keras_dml: deep metric learning for Keras 3 (TensorFlow, JAX, PyTorch).

`import keras_dml` imports every submodule, so every serializable class (losses,
layers, models, miners, proxies, preprocessing) is registered with Keras: in a
fresh process `keras.models.load_model("runs/<run>/model.keras")` and
`model.compile(loss="keras_dml>MultiSimilarity")` work after `import keras_dml`.

Where TensorFlow is not installed (`KERAS_BACKEND=jax` or `torch`), the
TensorFlow-only submodules (`_TENSORFLOW_ONLY`: SavedModel / TF Serving export,
`tf.distribute`) are left out: using one raises a one-line
`keras_dml.backend.TensorFlowRequiredError` naming it. `keras_dml.data` then
holds the NumPy sampler and stream only (see its docstring).

The one exception is the `keras-dml` command's own process: its `--help` answers
without TensorFlow, and `keras_dml.cli` calls `import_all()` before a subcommand
runs.
"""

import importlib
import importlib.util
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

# Submodules that are TensorFlow's whatever the Keras backend, with what they do.
_TENSORFLOW_ONLY = {
    "export": "keras_dml.export (SavedModel and TF Serving export)",
    "distribute": "keras_dml.distribute (tf.distribute)",
    "backup": "keras_dml.backup (the tf.data stream's position)",
}

# The file names of the console script (`keras-dml`, on Windows `keras-dml.exe`).
_COMMAND_NAMES = ("keras-dml", "keras-dml.exe", "keras-dml-script.py")


def import_all():
    """Imports every submodule (registering the serializable classes); returns them.

    Unless Keras runs on TensorFlow, the `_TENSORFLOW_ONLY` submodules are left out
    (they register no Keras class, and load on first use where TensorFlow is installed).
    """
    import keras

    tensorflow = keras.backend.backend() == "tensorflow"
    return {name: importlib.import_module(f"keras_dml.{name}") for name in _SUBMODULES
            if tensorflow or name not in _TENSORFLOW_ONLY}


def _in_command_line():
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(str(argv[0])) in _COMMAND_NAMES


def __getattr__(name):
    """Submodules load on first use (in the command's process, or a TensorFlow-only
    one without TensorFlow: then the one-line error naming it)."""
    if name in _TENSORFLOW_ONLY and importlib.util.find_spec("tensorflow") is None:
        from keras_dml import backend

        backend.require_tensorflow(_TENSORFLOW_ONLY[name])
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_dml.{name}")
    raise AttributeError(f"module 'keras_dml' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))


def _check_keras_backend():
    """Keras' backend must be installed: else one line saying which extra brings one."""
    try:
        import keras  # noqa: F401
    except ModuleNotFoundError as error:
        missing = (error.name or "").split(".")[0]
        if missing not in ("tensorflow", "jax", "torch"):
            raise
        raise ImportError(
            f"keras_dml needs a Keras backend, and Keras' backend {missing!r} "
            f"(KERAS_BACKEND) is not installed: pip install \"keras_dml[tensorflow]\" "
            f"(or [jax], [torch], with KERAS_BACKEND=jax / torch).") from None


if not _in_command_line():
    _check_keras_backend()
    import_all()
