"""The package's one order (docs/architecture.md, "Layers"): import-linter's contracts in
setup.cfg hold, they see an upward import inside a function, and the names and saved
files of the layout before the moves still work."""

import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_dml  # noqa: F401 (registers its Keras classes, as a user's script does)

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports")
needs_linter = pytest.mark.skipif(LINT_IMPORTS is None, reason="import-linter is not installed")


def lint_imports(root):
    """lint-imports in `root`: the package there, with the contracts of its setup.cfg."""
    return subprocess.run([LINT_IMPORTS, "--no-cache"],
                          cwd=root, env={"PYTHONPATH": str(root), "PATH": str(Path(
                              sys.executable).parent)}, capture_output=True, text=True)


@needs_linter
def test_every_import_points_downward_and_no_siblings_loop():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout


@needs_linter
@pytest.mark.parametrize("module, target, broken", [
    ("layers.py", "keras_dml.backbones", "keras_dml.layers is not allowed to import "
     "keras_dml.backbones"),  # layers sits below backbones
    ("backend/trainer.py", "keras_dml.data", "keras_dml.backend is not allowed to import "
     "keras_dml.data"),  # the backend is the ground floor
])
def test_the_contract_sees_an_upward_import_inside_a_function(tmp_path, module, target,
                                                              broken):
    shutil.copytree(ROOT / "keras_dml", tmp_path / "keras_dml",
                    ignore=shutil.ignore_patterns("__pycache__", "*.npz"))
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    with open(tmp_path / "keras_dml" / module, "a") as source:
        source.write(f"\n\ndef _upward():\n    import {target}  # noqa: F401\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert broken in result.stdout


def test_names_users_import_keep_working():
    from keras_dml import backbone_families, pair_designs
    from keras_dml.backbones import FAMILIES, Family, multi_level_embedder
    from keras_dml.data import GroupDesign, RandomPairDesign, importance_weights
    from keras_dml.data.designs import importance_weights as from_designs
    from keras_dml.layers import BackbonePreprocessing
    from keras_dml.training_config import backbone_name

    assert FAMILIES is backbone_families.FAMILIES and Family is backbone_families.Family
    assert importance_weights is from_designs is pair_designs.importance_weights
    assert GroupDesign is pair_designs.GroupDesign
    assert RandomPairDesign is pair_designs.RandomPairDesign
    assert BackbonePreprocessing("ResNet50").family == "ResNet50"
    assert backbone_name("resnet50v2") == "ResNet50V2"
    assert callable(multi_level_embedder)


def test_a_keras_file_saved_before_the_moves_loads(tmp_path):
    """config.json of a `.keras` file saved by the layout before the moves (a DMLModel
    with a BackbonePreprocessing layer, compiled with BalancedContrastive on a
    GroupDesign), with weights, loads and predicts as the model it describes."""
    config = (ROOT / "tests" / "data" / "keras_config_before_layering.json").read_text()
    described = keras.saving.deserialize_keras_object(json.loads(config))
    weights = tmp_path / "model.weights.h5"
    described.save_weights(weights)
    saved = tmp_path / "before_layering.keras"
    with zipfile.ZipFile(saved, "w") as archive:
        archive.writestr("config.json", config)
        archive.writestr("metadata.json", json.dumps({"keras_version": keras.__version__}))
        archive.write(weights, "model.weights.h5")

    model = keras.saving.load_model(saved)

    from keras_dml.data import GroupDesign
    from keras_dml.layers import BackbonePreprocessing
    from keras_dml.losses import BalancedContrastive
    from keras_dml.models import DMLModel

    assert isinstance(model, DMLModel)
    assert [layer.family for layer in model.layers
            if isinstance(layer, BackbonePreprocessing)] == ["ResNet50V2"]
    assert isinstance(model.loss, BalancedContrastive)
    assert model.loss.design == GroupDesign(m=2, n=2)
    pixels = np.full((2, 8, 8, 3), 128.0, "float32")
    np.testing.assert_allclose(model.predict(pixels, verbose=0),
                               described.predict(pixels, verbose=0), rtol=1e-6)
