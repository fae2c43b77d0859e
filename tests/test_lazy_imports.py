"""A Keras backend is imported only where it is used.

Each test runs a child process with TensorFlow installed but Keras on another
backend: `import keras_dml` must not import TensorFlow, and a search-only import
(`from keras_dml.index import Index`) must import neither TensorFlow nor JAX beyond
what `import keras` itself imports (Keras imports JAX wherever it is installed, for
its Orbax checkpoint callback).
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The package each Keras backend needs (Keras' numpy backend imports JAX for its FFT).
BACKENDS = {"jax": "jax", "torch": "torch", "numpy": "jax"}

pytestmark = pytest.mark.skipif(importlib.util.find_spec("tensorflow") is None,
                                reason="checks that an installed TensorFlow is not imported")


def _loaded_modules(backend, code):
    """The names among tensorflow, jax and torch that `code` left in sys.modules, as
    {"keras": after `import keras`, "after": after `code`}."""
    if importlib.util.find_spec(BACKENDS[backend]) is None:
        pytest.skip(f"Keras' {backend} backend needs {BACKENDS[backend]}, not installed")
    script = textwrap.dedent("""
        import sys
        NAMES = ("tensorflow", "jax", "torch")
        import keras
        assert keras.backend.backend() == {backend!r}
        before = [name for name in NAMES if name in sys.modules]
        {code}
        after = [name for name in NAMES if name in sys.modules]
        print(repr({{"keras": before, "after": after}}))
    """).format(backend=backend, code=code)
    env = dict(os.environ, KERAS_BACKEND=backend,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    return eval(result.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", ["jax", pytest.param("torch", marks=pytest.mark.slow)])
def test_import_keras_dml_leaves_tensorflow_out(backend):
    modules = _loaded_modules(backend, """
import keras_dml
assert keras.saving.get_registered_object("keras_dml>MultiSimilarity") is not None
""")
    assert "tensorflow" not in modules["after"], modules


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["torch", "numpy"])
def test_search_only_import_leaves_tensorflow_and_jax_out(backend):
    modules = _loaded_modules(backend, "from keras_dml.index import Index")
    assert "tensorflow" not in modules["after"], modules
    assert set(modules["after"]) == set(modules["keras"]), modules


@pytest.mark.slow
def test_tensorflow_only_names_still_load_on_first_use_off_its_backend():
    """`keras_dml.export` and the tf.data names import TensorFlow when used."""
    modules = _loaded_modules("torch", """
import keras_dml
assert "tensorflow" not in sys.modules
assert callable(keras_dml.data.class_balanced_batches)
assert callable(keras_dml.export.export_embedder)
from keras_dml.data import GroupDesign
""")
    assert "tensorflow" in modules["after"], modules


def test_a_lazy_name_stays_the_function_after_its_module_is_imported():
    """No lazy name of `keras_dml.data` shares its module's name: importing the module
    (as the embedding loop does) would otherwise replace the function by the module."""
    import keras_dml.data as data

    for name, module in data._TENSORFLOW_NAMES.items():
        assert name != module, f"keras_dml.data.{name} is also a module name"
        importlib.import_module(f"keras_dml.data.{module}")
        assert callable(getattr(data, name)) and not isinstance(getattr(data, name),
                                                                 type(data)), name
