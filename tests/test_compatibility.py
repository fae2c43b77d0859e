"""The compatibility policy (CHANGELOG.md, "Deprecations"): what protects users' saved files
and public imports stays for one release with a DeprecationWarning that names the release
removing it; this module fails once the version reaches that release, so the removal is not
forgotten."""

import warnings

import pytest

import keras_dml
from keras_dml import hyperparameters


def _release(version):
    return tuple(int(part) for part in version.split(".")[:2])


def test_the_deprecated_names_are_removed_by_their_release():
    assert _release(keras_dml.__version__) < _release(hyperparameters.REMOVED_IN), (
        f"keras_dml {keras_dml.__version__} reached {hyperparameters.REMOVED_IN}: remove the "
        "former names (keras_dml._MOVED, keras_dml.training._FORMER, every renamed keyword "
        "and the deprecated functions the CHANGELOG lists), then raise REMOVED_IN")


@pytest.mark.parametrize("use", [
    lambda: keras_dml.losses.MultiSimilarity(mining=False),
    lambda: keras_dml.losses.Triplet(mining="hard"),
    lambda: keras_dml.evaluation.nearest_neighbors(
        [[1.0, 0], [1, 0.1], [0, 1], [0.1, 1]], k=1, distance="cosine"),
    lambda: keras_dml.training.KS,
], ids=["keyword of a loss", "mining of Triplet", "renamed keyword", "former name"])
def test_each_deprecation_names_its_replacement_and_the_release(use):
    with pytest.warns(DeprecationWarning, match=r"is deprecated and removed in 0\.3: "):
        use()


def test_a_former_module_path_imports_with_the_warning():
    import importlib
    import sys

    sys.modules.pop("keras_dml.recipes", None)
    with pytest.warns(DeprecationWarning, match="0.3: import keras_dml.training.recipes"):
        module = importlib.import_module("keras_dml.recipes")
    assert module is importlib.import_module("keras_dml.training.recipes")


def test_a_private_former_name_is_gone():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError, match="_input_spec"):
            keras_dml.training._input_spec  # noqa: B018
