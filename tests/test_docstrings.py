"""The `>>>` examples in keras_dml's docstrings run as written (doctest).

Each docstring with examples is one test, run with its module's globals plus `keras`,
`keras_dml`, `tf` and `np`, in a temporary working directory. An example that needs
data or a trained model it cannot build in a few lines says `# doctest: +SKIP`.
"""

import doctest
import importlib
import pkgutil

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from conftest import EXTRAS

#: examples that take long (they build and run whole networks): the full tier only
SLOW = {
    "keras_dml.plots.weights.weight_curves",
    "keras_dml.backbones.multi_level_embedder",
}


def _docstring_tests():
    """The examples of every module, and as a test each the modules that need an optional
    package not installed here (module name -> package): they skip, naming it."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests, unimportable = [], {}
    for info in pkgutil.walk_packages(keras_dml.__path__, "keras_dml."):
        try:
            module = importlib.import_module(info.name)
        except ModuleNotFoundError as error:
            package = (error.name or "").split(".")[0]
            if package not in EXTRAS:
                raise
            unimportable[info.name] = package
            continue
        tests += [test for test in finder.find(module) if test.examples]
    return sorted(tests, key=lambda test: test.name), unimportable


DOCTESTS, UNIMPORTABLE = _docstring_tests()


def _example_names():
    """What the examples may use without defining it: the libraries, a small `DMLModel`
    to compile, and a batch of 64 unit `embeddings` (d = 8) with `labels` (32 x 2)."""
    inputs = keras.Input((8,))
    model = keras_dml.models.DMLModel(inputs, keras_dml.layers.EmbeddingHead(8)(inputs))
    embeddings = np.random.default_rng(0).normal(size=(64, 8)).astype("float32")
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return {"keras": keras, "keras_dml": keras_dml, "tf": tf, "np": np, "model": model,
            "embeddings": embeddings, "labels": np.repeat(np.arange(32), 2)}


def test_the_docstrings_hold_examples():
    assert len(DOCTESTS) >= 50


@pytest.mark.parametrize("test", [
    pytest.param(test, id=test.name, marks=[pytest.mark.slow] if test.name in SLOW else [])
    for test in DOCTESTS] + [
    pytest.param(None, id=module, marks=pytest.mark.requires(package))
    for module, package in sorted(UNIMPORTABLE.items())])
def test_docstring_examples_run(test, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name, value in _example_names().items():
        test.globs.setdefault(name, value)
    report = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(test, out=report.append, clear_globs=False)
    assert result.failed == 0, "".join(report)
