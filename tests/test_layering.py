"""The package's one order (docs/architecture.md, "Layers"): import-linter's contracts in
setup.cfg hold, they see an upward import inside a function, setup.cfg and the docs list
the same floors, and the names, module paths and saved files of the layouts before the
moves still work."""

import ast
import configparser
import importlib
import json
import re
import shutil
import subprocess
import sys
import warnings
import zipfile
from pathlib import Path

import keras
import numpy as np
import pytest

from conftest import EXTRAS

import keras_dml  # noqa: F401 (registers its Keras classes, as a user's script does)

ROOT = Path(__file__).resolve().parents[1]


def lint_imports(root):
    """lint-imports in `root`: the package there, with the contracts of its setup.cfg, run by
    this interpreter (never a `lint-imports` found on PATH, and never skipped: import-linter
    is in the `test` extra)."""
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import "
                           "lint_imports_command; sys.exit(lint_imports_command())", "--no-cache"],
                          cwd=root, env={"PYTHONPATH": str(root), "PATH": str(Path(
                              sys.executable).parent)}, capture_output=True, text=True)


def test_every_import_points_downward_and_no_siblings_loop():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout


@pytest.mark.parametrize("module, target, broken", [
    ("layers/embedding.py", "keras_dml.backbones", "keras_dml.layers is not allowed to import "
     "keras_dml.backbones"),  # layers sits below backbones
    ("layers/proxies.py", "keras_dml.losses", "keras_dml.layers is not allowed to import "
     "keras_dml.losses"),  # losses hold layers, not the reverse
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
    from keras_dml.training.config import backbone_name

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


def setup_cfg_floors():
    """The floors of setup.cfg's import-linter `layers` contract, bottom to top, each a
    list of module names (an optional floor's parentheses removed)."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["importlinter:contract:floors"]["layers"].strip().splitlines()
    return [[name.strip().strip("()") for name in line.split(":")] for line in reversed(lines)]


def documented_floors():
    """The floors of docs/architecture.md's table, bottom to top."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text[text.index("## Layers"):text.index("## Where things live")]
    rows = re.findall(r"^\| (\d+) \| (.+?) \| .+ \|$", section, flags=re.M)
    assert [int(number) for number, _ in rows] == list(range(1, len(rows) + 1))
    return [re.findall(r"`([a-z_]+)`", modules) for _, modules in rows]


def test_setup_cfg_and_the_docs_list_the_same_floors_in_order():
    floors = setup_cfg_floors()
    assert ["inference"] in floors and floors.index(["inference"]) + 1 == floors.index(
        ["evaluation"])  # directly below evaluation
    assert documented_floors() == floors


def test_the_top_level_holds_only_the_core():
    """Every top-level module of the package sits on a floor of setup.cfg (packages
    aside), and the floors name only modules or packages that exist or are optional."""
    modules = {path.stem for path in (ROOT / "keras_dml").glob("*.py")} - {"__init__"}
    on_floors = {name for floor in setup_cfg_floors() for name in floor}
    assert modules <= on_floors, modules - on_floors
    assert modules == {"ops", "validation", "hyperparameters", "weighting", "pair_designs",
                       "backbone_families", "backbones", "hub_backbones"}


#: Modules that declare no `__all__`: `python -m keras_dml.cli` runs this script, which
#: imports the command's entry point to call it; nothing imports names from it.
_NO_API = ("cli/__main__.py",)


#: Optional packages a module may import at its top: conftest's extras (each Keras
#: backend's own modules need that backend) and what the extras bring with them. A
#: module that needs one is skipped where it is absent.
_OPTIONAL = (*EXTRAS, "tensorflow_datasets", "tensorflow_serving", "jaxlib", "matplotlib")


def _package_modules():
    return sorted((ROOT / "keras_dml").rglob("*.py"))


def _module_name(path):
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _code_lines(node, source_lines):
    """Lines of `node` that hold code (not blank, not only a comment, not its docstring)."""
    body = node.body
    skip = set()
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip = set(range(body[0].lineno, body[0].end_lineno + 1))
    return sum(1 for number in range(node.lineno, node.end_lineno + 1)
               if number not in skip and source_lines[number - 1].strip()
               and not source_lines[number - 1].strip().startswith("#"))


@pytest.mark.parametrize("path", _package_modules(), ids=lambda path: str(
    path.relative_to(ROOT / "keras_dml")))
def test_modules_are_small_with_short_functions_and_declare_their_api(path):
    source = path.read_text()
    lines = source.splitlines()
    assert len(lines) <= 600, f"{path.name}: {len(lines)} lines"
    tree = ast.parse(source)
    long = [(node.name, _code_lines(node, lines)) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and _code_lines(node, lines) > 80]
    assert not long, long
    names = [target.id for node in tree.body if isinstance(node, ast.Assign)
             for target in node.targets if isinstance(target, ast.Name)]
    defines = [node for node in tree.body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.ImportFrom))]
    if defines and str(path.relative_to(ROOT / "keras_dml")) not in _NO_API:
        # (a docstring-only package, backend/jax/, has no names to declare)
        assert "__all__" in names, f"{path.relative_to(ROOT)} declares no __all__"


def test_the_modules_without_all_are_few_and_exist():
    for name in _NO_API:
        assert (ROOT / "keras_dml" / name).is_file(), name
    assert len(_NO_API) == 1


@pytest.mark.parametrize("path", [path for path in _package_modules() if str(
    path.relative_to(ROOT / "keras_dml")) not in _NO_API], ids=lambda path: str(
    path.relative_to(ROOT / "keras_dml")))
def test_every_name_in_all_exists_in_its_module(path):
    try:
        module = importlib.import_module(_module_name(path))
        declared = getattr(module, "__all__", [])
        missing = [name for name in declared if not hasattr(module, name)]  # lazy names load
    except ImportError as error:  # TensorFlowRequiredError is one too
        if (getattr(error, "name", None) or "").split(".")[0] in _OPTIONAL or isinstance(
                error, keras_dml.backend.TensorFlowRequiredError):
            pytest.skip(f"{_module_name(path)} needs an optional package: {error}")
        raise
    assert len(set(declared)) == len(declared), f"{module.__name__}: a name twice in __all__"
    assert all(isinstance(name, str) for name in declared)
    assert not missing, f"{module.__name__}.__all__ names what it lacks: {missing}"


def test_the_lazy_names_of_data_are_imported_for_static_readers_from_their_modules():
    """keras_dml.data loads its tf.data names on first use (`_TENSORFLOW_NAMES`); its
    `if typing.TYPE_CHECKING:` block imports the same names from the same modules, so
    griffe (the API pages) sees what `__all__` declares."""
    from keras_dml import data

    tree = ast.parse((ROOT / "keras_dml" / "data" / "__init__.py").read_text())
    blocks = [node for node in tree.body if isinstance(node, ast.If)
              and ast.unparse(node.test) == "typing.TYPE_CHECKING"]
    assert len(blocks) == 1
    imported = {alias.name: node.module.rpartition(".")[2] for node in blocks[0].body
                for alias in node.names}
    assert imported == data._TENSORFLOW_NAMES
    assert set(data.__all__) == set(imported) | {
        name for name in data.__all__ if name in vars(data)}


def test_code_lines_count_the_signature_and_body_not_the_docstring_or_comments():
    source = ("def f():\n    \"\"\"Doc,\n    two lines.\"\"\"\n    # a comment\n\n"
              + "".join(f"    x{i} = {i}\n" for i in range(80)))
    function = ast.parse(source).body[0]
    assert _code_lines(function, source.splitlines()) == 81


# Former module path -> (its module now, a name users imported from it).
_MOVED_MODULES = {
    "keras_dml.batch_norm": ("keras_dml.layers.batch_norm", "FusedBatchNormalization"),
    "keras_dml.convolution": ("keras_dml.layers.convolution", "ShiftedConv2D"),
    "keras_dml.pooling": ("keras_dml.layers.pooling", "TiledMaxPooling2D"),
    "keras_dml.proxy_layers": ("keras_dml.layers.proxies", "Proxies"),
    "keras_dml.momentum": ("keras_dml.layers.momentum", "MomentumEncoder"),
    "keras_dml.regularizers": ("keras_dml.layers.regularizers", "LpNorm"),
    "keras_dml.fine_tuning": ("keras_dml.callbacks.fine_tuning", "freeze_batch_norm"),
    "keras_dml.backup": ("keras_dml.callbacks.backup", "TrainingBackup"),
    "keras_dml.training_config": ("keras_dml.training.config", "TrainConfig"),
    "keras_dml.recipes": ("keras_dml.training.recipes", "RECIPES"),
    "keras_dml.distribute": ("keras_dml.training.distribute", "BackupAndRestore"),
    "keras_dml.projector": ("keras_dml.training.projector", "write_projector"),
    "keras_dml.backend.batch_norm": ("keras_dml.backend.layers", "fused_batch_norm"),
    "keras_dml.backend.convolution": ("keras_dml.backend.layers", "one_channel_convolution"),
    "keras_dml.backend.trainer_tensorflow": ("keras_dml.backend.tensorflow.trainer",
                                             "train_step"),
    "keras_dml.backend.tensorflow_row_blocks": ("keras_dml.backend.tensorflow.row_blocks",
                                                "block_array"),
}


@pytest.mark.parametrize("old, new_and_name", _MOVED_MODULES.items(), ids=list(_MOVED_MODULES))
def test_a_former_module_path_imports_the_module_with_a_deprecation_warning(
        monkeypatch, old, new_and_name):
    new, name = new_and_name
    if new.startswith("keras_dml.backend.tensorflow."):
        pytest.importorskip("tensorflow", reason="TensorFlow's own modules")
    monkeypatch.delitem(sys.modules, old, raising=False)
    with pytest.warns(DeprecationWarning, match=re.escape(
            f"{old} is deprecated and removed in 0.3: import {new}")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new  # its own spec, not the former path's
    assert getattr(module, name) is getattr(importlib.import_module(new), name)
    parent, _, child = old.rpartition(".")
    assert getattr(importlib.import_module(parent), child) is module


def test_names_of_the_former_modules_keep_working_from_their_packages():
    from keras_dml import callbacks, layers, models, training
    from keras_dml.callbacks.backup import TrainingBackup
    from keras_dml.callbacks.fine_tuning import BackboneStepScale
    from keras_dml.layers.batch_norm import FusedBatchNormalization
    from keras_dml.layers.embedding import EmbeddingHead
    from keras_dml.models.dml_model import NONFINITE_MESSAGE, DMLModel, StopOnNonFinite
    from keras_dml.training.evaluation import KS, RunEvaluation
    from keras_dml.training.job import run
    from keras_dml.training import run_folder
    from keras_dml.training.run_folder import SUMMARY, failure_kept_or_removed

    assert layers.EmbeddingHead is EmbeddingHead
    assert layers.FusedBatchNormalization is FusedBatchNormalization
    assert models.DMLModel is DMLModel and models.NONFINITE_MESSAGE is NONFINITE_MESSAGE
    assert callbacks.StopOnNonFinite is models.StopOnNonFinite is StopOnNonFinite
    assert callbacks.TrainingBackup is TrainingBackup
    assert callbacks.BackboneStepScale is BackboneStepScale
    assert training.run is run
    with pytest.deprecated_call(match="0.3: import it from keras_dml.training.evaluation"):
        assert training.KS == KS and training.RunEvaluation is RunEvaluation
    with pytest.deprecated_call():
        assert training.SUMMARY == SUMMARY
    assert run_folder.failure_kept_or_removed is failure_kept_or_removed
    with pytest.raises(AttributeError):  # the private former names went in 0.2
        training._failure_kept_or_removed  # noqa: B018
    assert set(training.__all__) <= set(dir(training))
    former = ["KS", "SUMMARY", "CLASS_NAMES", "FAILED", "Clock", "RunEvaluation", "TrainConfig",
              "ConsoleReport", "run", "run_directory", "load_run_config", "apply_run_defaults",
              "build_model", "compile_model", "make_loss", "adam", "learning_rate_schedule",
              "step_jit_compile", "backbone_variables", "augmentation", "array_transform",
              "evaluation_splits", "write_plots", "metrics_row", "metrics_table",
              "check_meaningful", "chance_recall", "run_verdict", "TSNE_POINTS",
              "TSNE_ITERATIONS", "TSNE_THREADS", "FILE_IMAGE_SIZE", "LR_SCHEDULES",
              "OWN_DATASETS", "own_files_options"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert all(getattr(training, name) is not None for name in former)
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        training.nothing  # noqa: B018


def test_every_layer_keeps_its_registered_name():
    from keras_dml import layers

    for name in layers.__all__:
        value = getattr(layers, name)
        if isinstance(value, type) and issubclass(value, keras.layers.Layer):
            assert keras.saving.get_registered_name(value) == f"keras_dml>{name}"
            assert keras.saving.get_registered_object(f"keras_dml>{name}") is value


def test_a_keras_file_saved_before_the_packages_loads_and_predicts_the_same(tmp_path):
    """tests/data/model_before_packages.keras was saved by the code before the layers,
    models and callbacks became packages: a DMLModel of ShiftedConv2D,
    FusedBatchNormalization, TiledMaxPooling2D and a GeM EmbeddingHead with an LpNorm
    regulariser, compiled with ProxyAnchor (whose proxies it holds), trained two epochs."""
    from keras_dml.layers import (EmbeddingHead, FusedBatchNormalization,
                                  GeneralizedMeanPooling, LpNorm, Proxies, ShiftedConv2D,
                                  TiledMaxPooling2D)
    from keras_dml.losses import ProxyAnchor
    from keras_dml.models import DMLModel

    saved = np.load(ROOT / "tests" / "data" / "model_before_packages.npz")
    model = keras.saving.load_model(ROOT / "tests" / "data" / "model_before_packages.keras")

    assert isinstance(model, DMLModel)
    kinds = [type(layer) for layer in model.layers]
    for kind in (ShiftedConv2D, FusedBatchNormalization, TiledMaxPooling2D, EmbeddingHead):
        assert kind in kinds
    head = model.layers[-1]
    assert isinstance(head.gem, GeneralizedMeanPooling)
    assert isinstance(head.embedding_regularizer, LpNorm)
    assert isinstance(model.loss, ProxyAnchor)
    assert isinstance(model.loss.trainable_layer, Proxies)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.loss.trainable_layer.proxies), saved["proxies"])
    np.testing.assert_allclose(model.predict(saved["images"], verbose=0), saved["embeddings"],
                               atol=1e-5)
    model.save(tmp_path / "again.keras")  # and it saves again under the new layout
    again = keras.saving.load_model(tmp_path / "again.keras")
    np.testing.assert_allclose(again.predict(saved["images"], verbose=0), saved["embeddings"],
                               atol=1e-5)


@pytest.mark.parametrize("package", sorted(
    str(init.parent.relative_to(ROOT)).replace("/", ".")
    for init in (ROOT / "keras_dml").rglob("__init__.py") if init.parent != ROOT / "keras_dml"))
def test_no_public_name_of_a_package_is_also_one_of_its_submodules(package):
    """Importing a submodule binds its name on the package: a public function of the same
    name would then be replaced by the module (and API pages would show the module)."""
    module = importlib.import_module(package)
    folder = ROOT / package.replace(".", "/")
    submodules = {path.stem for path in folder.glob("*.py")} | {
        path.name for path in folder.iterdir() if (path / "__init__.py").exists()}
    assert not set(getattr(module, "__all__", ())) & submodules
