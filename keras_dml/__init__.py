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

The one exception is the `keras-dml` command's own process (the console script, or
`python -m keras_dml.cli`): its `--help` answers without TensorFlow, and
`keras_dml.cli` calls `import_all()` before a subcommand runs.
"""

import importlib
import importlib.abc
import importlib.util
import os
import sys
import warnings

__version__ = "0.1.0"

_SUBMODULES = (
    "ops",
    "validation",
    "hyperparameters",
    "weighting",
    "mining",
    "losses",
    "layers",
    "models",
    "data",
    "datasets",
    "backbones",
    "inference",
    "evaluation",
    "callbacks",
    "export",
    "plots",
    "index",
    "training",
)

# Submodules that are TensorFlow's whatever the Keras backend, with what they do.
_TENSORFLOW_ONLY = {
    "export": "keras_dml.export (SavedModel and TF Serving export)",
    "distribute": "keras_dml.training.distribute (tf.distribute)",
}

# The submodules (a star import leaves out the TensorFlow-only ones) and `import_all`.
__all__ = ["import_all", *(name for name in _SUBMODULES if name not in _TENSORFLOW_ONLY)]

# Modules that moved into the packages: their former path -> where they are now.
_MOVED = {
    "keras_dml.batch_norm": "keras_dml.layers.batch_norm",
    "keras_dml.convolution": "keras_dml.layers.convolution",
    "keras_dml.pooling": "keras_dml.layers.pooling",
    "keras_dml.proxy_layers": "keras_dml.layers.proxies",
    "keras_dml.momentum": "keras_dml.layers.momentum",
    "keras_dml.regularizers": "keras_dml.layers.regularizers",
    "keras_dml.backup": "keras_dml.callbacks.backup",
    "keras_dml.fine_tuning": "keras_dml.callbacks.fine_tuning",
    "keras_dml.training_config": "keras_dml.training.config",
    "keras_dml.recipes": "keras_dml.training.recipes",
    "keras_dml.distribute": "keras_dml.training.distribute",
    "keras_dml.projector": "keras_dml.training.projector",
    "keras_dml.backend.batch_norm": "keras_dml.backend.layers",
    "keras_dml.backend.convolution": "keras_dml.backend.layers",
    "keras_dml.backend.trainer_tensorflow": "keras_dml.backend.tensorflow.trainer",
    "keras_dml.backend.trainer_jax": "keras_dml.backend.jax.trainer",
    "keras_dml.backend.trainer_torch": "keras_dml.backend.torch.trainer",
    "keras_dml.backend.tensorflow_row_blocks": "keras_dml.backend.tensorflow.row_blocks",
    "keras_dml.backend.layers_jax": "keras_dml.backend.jax.layers",
    "keras_dml.backend.layers_torch": "keras_dml.backend.torch.layers",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports a former module path (`_MOVED`) as the module now there, with a
    DeprecationWarning naming the new path."""

    def __init__(self):
        self._own_specs = {}

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in _MOVED else None

    def create_module(self, spec):
        from keras_dml.hyperparameters import deprecation

        warnings.warn(deprecation(spec.name, f"import {_MOVED[spec.name]}"),
                      DeprecationWarning, stacklevel=2)
        module = importlib.import_module(_MOVED[spec.name])
        self._own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module):
        """The module was run where it lives now: it gets back its own spec, which the
        import system replaced by the former path's."""
        module.__spec__ = self._own_specs[module.__name__]


if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
    sys.meta_path.insert(0, _MovedModules())  # before a stale copy of a former file

# The file names of the console script (`keras-dml`, on Windows `keras-dml.exe`).
_COMMAND_NAMES = ("keras-dml", "keras-dml.exe", "keras-dml-script.py")
# The modules `python -m` runs as the command.
_COMMAND_MODULES = ("keras_dml.cli", "keras_dml.cli.__main__")


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
    if os.path.basename(str(argv[0])) in _COMMAND_NAMES:
        return True
    given = list(getattr(sys, "orig_argv", ()))  # `python -m keras_dml.cli ...`
    return any(flag == "-m" and module in _COMMAND_MODULES
               for flag, module in zip(given, given[1:]))


def __getattr__(name):
    """Submodules load on first use (in the command's process, or a TensorFlow-only
    one without TensorFlow: then the one-line error naming it)."""
    if name in _TENSORFLOW_ONLY and importlib.util.find_spec("tensorflow") is None:
        from keras_dml import backend

        backend.require_tensorflow(_TENSORFLOW_ONLY[name])
    if name in _SUBMODULES or f"keras_dml.{name}" in _MOVED:
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
