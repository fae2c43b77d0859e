"""The `keras-dml` command: short runs on the bundled digits, help, errors, run folders."""

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import pytest

from keras_dml import cli
from keras_dml.cli.parser import _bad_image_hint, _missing_module_message

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TINY = ["--dataset", "digits", "--epochs", "1", "--steps-per-epoch", "2",
        "--classes-per-batch", "5", "--samples-per-class", "4", "--embedding-dim", "16"]


def _console_script(tmp_path):
    """A copy of the `keras-dml` console script pip writes, running this tree."""
    script = tmp_path / "keras-dml"
    script.write_text("import sys\nfrom keras_dml.cli import main\nsys.exit(main())\n")
    return script


def _run_script(tmp_path, *args, python_args=()):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the command must quiet TensorFlow itself
    return subprocess.run([sys.executable, *python_args, str(_console_script(tmp_path)), *args],
                          capture_output=True, text=True, env=env, cwd=tmp_path)


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"]])
def test_help_does_not_import_tensorflow(args, tmp_path):
    result = _run_script(tmp_path, *args, python_args=("-X", "importtime"))
    assert result.returncode == 0, result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines()
                if line.startswith("import time:")}
    assert "keras_dml.cli" in imported
    assert not {"tensorflow", "keras", "numpy"} & imported
    if args == ["train", "--help"]:
        from keras_dml.training.config import DATASETS, LOSSES

        text = " ".join(result.stdout.split())
        for name in DATASETS + LOSSES:
            assert re.search(rf"\b{name}\b", text), name
        for option in ("--overwrite", "--run-name", "--data-dir", "--image-size"):
            assert option in text


def test_every_command_has_help():
    """Each subcommand's `--help` formats (argparse expands `%` in help texts)."""
    import argparse

    from keras_dml.cli.parser import build_parser

    commands = next(action for action in build_parser()._actions
                    if isinstance(action, argparse._SubParsersAction))
    assert len(commands.choices) >= 10
    for name, command_parser in commands.choices.items():
        assert command_parser.format_help().startswith("usage:"), name


def test_listed_names_are_the_registry():
    """`--help` lists names without TensorFlow: the static lists must stay the registry's."""
    import keras_dml
    from keras_dml.training.config import BACKBONES, DATASETS, LOSSES

    assert tuple(sorted(LOSSES)) == tuple(sorted(keras_dml.losses.LOSSES)), (
        "add the new loss to keras_dml/training/config.py LOSSES")
    assert sorted(DATASETS) == keras_dml.datasets.available(), (
        "add the new dataset to keras_dml/training/config.py DATASETS")
    assert sorted(BACKBONES) == sorted(keras_dml.backbones.BACKBONES)


@pytest.mark.slow
def test_import_keras_dml_registers_every_serializable_class(tmp_path):
    """In a fresh process, `import keras_dml` imports every module that registers a class."""
    registering = sorted(
        os.path.relpath(os.path.join(folder, name), ROOT)[:-3].replace(os.sep, ".")
        for folder, _, files in os.walk(os.path.join(ROOT, "keras_dml")) for name in files
        if name.endswith(".py")
        and "register_keras_serializable" in open(os.path.join(folder, name)).read())
    assert "keras_dml.layers.embedding" in registering
    code = textwrap.dedent("""
        import sys, keras, keras_dml
        from keras_dml.training.config import LOSSES
        print(' '.join(m for m in sys.argv[1:] if m not in sys.modules))
        print(' '.join(n for n in LOSSES
                       if keras.saving.get_registered_object('keras_dml>' + n) is None))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", code, *registering], capture_output=True,
                            text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    modules, losses = (result.stdout + "\n").split("\n")[:2]
    assert losses.split() == [], "these losses are not registered by import keras_dml"
    assert modules.split() == [], "add these modules' packages to keras_dml._SUBMODULES"


def _assert_projector_files(run_dir, summary):
    """The run's TensorBoard projector files describe the evaluation set (digits 5-9)."""
    import math

    import numpy as np
    import tensorflow as tf

    import keras_dml

    log_dir = run_dir / "tensorboard"
    assert summary["projector"] == str(log_dir / "projector_config.pbtxt")
    test = keras_dml.datasets.load("digits").test
    n, dim = len(test.labels), int(TINY[TINY.index("--embedding-dim") + 1])
    vectors = np.loadtxt(log_dir / "vectors.tsv", delimiter="\t")
    assert vectors.shape == (n, dim)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-4)
    rows = (log_dir / "metadata.tsv").read_text().splitlines()
    assert rows[0] == "label\tclass"
    assert rows[1:] == [f"{label}\t{test.class_names[label]}" for label in test.labels]
    config = (log_dir / "projector_config.pbtxt").read_text()
    assert f"tensor_shape: {n}\n  tensor_shape: {dim}\n" in config
    assert 'tensor_path: "vectors.tsv"' in config and 'metadata_path: "metadata.tsv"' in config
    assert 'image_path: "sprite.png"' in config
    side = int(re.search(r"single_image_dim: (\d+)", config).group(1))
    sprite = tf.io.decode_png(tf.io.read_file(str(log_dir / "sprite.png"))).numpy()
    assert sprite.shape[:2] == (math.ceil(math.sqrt(n)) * side,) * 2


def test_train_prints_recall_saves_and_exports(tmp_path, capsys):
    runs, exports = tmp_path / "runs", tmp_path / "savedmodels"
    code = cli.main(["train", *TINY, "--runs-dir", str(runs), "--export-dir", str(exports),
                     "--run-name", "smoke", "--no-plots"])
    out = capsys.readouterr().out
    assert code == 0
    assert out.splitlines()[0].startswith("CPU kind: ")  # the CPU-dependent form taken
    assert "before training" in out and "after training" in out and "gain" in out
    assert f"run:        {runs / 'smoke'}/" in out and "SavedModel:" in out
    summary = json.loads((runs / "smoke" / "summary.json").read_text())
    assert 0.0 <= summary["recall_after"]["recall@1"] <= 1.0
    assert summary["export"] == {"base_dir": str(exports / "smoke"), "input_format": "images",
                                 "preprocessing": None}
    assert os.path.exists(runs / "smoke" / "model.keras")
    assert os.path.exists(exports / "smoke" / "1" / "saved_model.pb")
    _assert_projector_files(runs / "smoke", summary)

    # The same run name again: refused, naming the ways out, before any work.
    code = cli.main(["train", *TINY, "--runs-dir", str(runs), "--export-dir", str(exports),
                     "--run-name", "smoke"])
    err = capsys.readouterr().err
    assert code == 2 and "already exists" in err
    assert "--overwrite" in err and "--run-name" in err and "overwrite=True" not in err

    # `keras-dml export <run>` exports the run as it was trained, with no other flag ...
    assert cli.main(["export", str(runs / "smoke"), "--no-verify"]) == 0
    assert f"SavedModel: {exports / 'smoke' / '2'}" in capsys.readouterr().out
    info = json.loads((exports / "smoke" / "2" / "keras_dml_export.json").read_text())
    assert [spec["format"] for spec in info["inputs"].values()] == ["images"]
    assert info["preprocessing"] is None
    # ... and never replaces a version silently.
    code = cli.main(["export", str(runs / "smoke" / "model.keras"), "--version", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "--overwrite" in err and "overwrite=True" not in err


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_overwrite_replaces_the_run_folder(tmp_path, capsys):
    runs = tmp_path / "runs"
    (runs / "again").mkdir(parents=True)
    (runs / "again" / "stale.txt").write_text("from an older run")
    code = cli.main(["train", *TINY, "--runs-dir", str(runs), "--run-name", "again",
                     "--overwrite", "--no-export", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    files = os.listdir(runs / "again")
    assert "stale.txt" not in files and {"history.csv", "model.keras", "summary.json"} <= set(files)


def test_default_run_names_never_collide(tmp_path):
    from keras_dml.training.run_folder import run_directory
    from keras_dml.training.config import TrainConfig

    config = TrainConfig(runs_dir=str(tmp_path))
    first, path = run_directory(config)
    os.makedirs(path)
    second, _ = run_directory(config)
    assert first.startswith(f"omniglot-{config.loss}-") and second != first


def test_errors_use_the_command_words(tmp_path, capsys):
    code = cli.main(["train", "--dataset", "omniglot", "--data-dir", str(tmp_path / "none"),
                     "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--data-dir" in err and "data_dir" not in err
    assert err.startswith("keras-dml train: error: omniglot:")


def test_missing_optional_dependency_names_the_extra():
    error = ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert _missing_module_message(error) == \
        'matplotlib is not installed: pip install "keras_dml[plots]"'


@pytest.mark.parametrize("command", ["train", "embed", "index", "calibrate"])
def test_bad_image_hint_names_only_the_commands_own_flags(command):
    from keras_dml.data.bad_images import BadImageGuard

    with pytest.raises(ValueError) as error:
        BadImageGuard(lambda i: f"image {i} 'x.jpg'").check(0, [0], [False])
    command_parser = cli.build_parser().command_parsers[command]
    message = cli.flag_words(_bad_image_hint(str(error.value), command_parser), command_parser)
    assert "x.jpg" in message and "skip_bad_images" not in message
    listed = ("(keras_dml.data.verify_images or `keras-dml verify DIR|CSV` lists every bad "
              "file in one pass)")
    # Every command listed takes --skip-bad-images, so each hint offers it.
    assert message.endswith(f"{listed}, or skip the bad files with --skip-bad-images."), message


def test_unknown_loss_is_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "--loss", "NoSuchLoss", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "Unknown loss 'NoSuchLoss'" in capsys.readouterr().err


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_proxy_loss_gets_the_training_class_count(tmp_path, capsys):
    code = cli.main(["train", *TINY, "--loss", "ProxyAnchor", "--runs-dir", str(tmp_path),
                     "--run-name", "proxies", "--no-export", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "proxies" / "summary.json").read_text())
    assert summary["config"]["loss"] == "ProxyAnchor"
    from keras_dml import training

    assert training.make_loss("ProxyNCA", num_classes=5).num_classes == 5
    assert training.make_loss("ProxyNCA", {"num_classes": 3}, num_classes=5).num_classes == 3
    assert training.make_loss("Margin", num_classes=5).num_classes is None  # optional: global


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_memory_size_wraps_the_loss_in_a_cross_batch_memory(tmp_path, capsys):
    code = cli.main(["train", *TINY, "--memory-size", "64", "--runs-dir", str(tmp_path),
                     "--run-name", "xbm", "--no-export", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    run = tmp_path / "xbm"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"]["memory_size"] == 64 and summary["config"]["memory_warmup"] == 0
    assert json.loads((run / "config.json").read_text())["memory_size"] == 64
    import keras

    from keras_dml import losses

    model = keras.models.load_model(run / "model.keras")
    assert isinstance(model.dml_loss, losses.CrossBatchMemory)
    assert type(model.dml_loss.loss).__name__ == summary["config"]["loss"]
    assert model.dml_loss.memory_size == 64
    # 2 steps of 5 x 4 went into the memory (evaluations read it without writing)
    assert int(model.loss_layer.steps) == 2 and int(model.loss_layer.filled) == 40
    # a loss without a memory form is refused before the run folder is made
    code = cli.main(["train", *TINY, "--loss", "ProxyAnchor", "--memory-size", "64",
                     "--runs-dir", str(tmp_path), "--run-name", "refused", "--no-export",
                     "--no-plots"])
    assert code == 2 and "pair loss" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_memory_momentum_and_batch_loss_reach_the_wrapper(tmp_path, capsys):
    code = cli.main(["train", *TINY, "--memory-size", "64", "--memory-momentum", "0.99",
                     "--memory-batch-loss", "--runs-dir", str(tmp_path), "--run-name", "moco",
                     "--no-export", "--no-plots"])
    assert code == 0, capsys.readouterr().err
    import keras

    model = keras.models.load_model(tmp_path / "moco" / "model.keras")
    assert model.dml_loss.momentum == pytest.approx(0.99)
    assert model.dml_loss.include_batch_loss is True
    config = json.loads((tmp_path / "moco" / "config.json").read_text())
    assert config["memory_momentum"] == 0.99 and config["memory_batch_loss"] is True


@pytest.mark.parametrize("flags, message", [
    (["--memory-momentum", "0.9"], "need a memory"),
    (["--memory-batch-loss"], "need a memory"),
    (["--memory-size", "64", "--memory-momentum", "1.0"],
     "--memory-momentum must be in [0, 1), got 1.0"),
])
def test_memory_option_errors_name_the_problem(tmp_path, capsys, flags, message):
    code = cli.main(["train", *TINY, *flags, "--runs-dir", str(tmp_path), "--run-name", "bad",
                     "--no-export", "--no-plots"])
    assert code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


@pytest.mark.slow  # a distributed training run
def test_strategy_mirrored_trains_on_two_replicas(tmp_path, capsys, monkeypatch,
                                                 mirrored_strategy):
    """`--strategy mirrored` over the two logical CPUs of conftest. `make_strategy` runs
    as the CLI calls it; the MirroredStrategy it builds is the session's (the same
    devices): a second strategy in one process would restart TensorFlow's collective
    keys (see conftest)."""
    import tensorflow as tf

    built = []

    def session_strategy(*args, **kwargs):
        built.append((args, kwargs))
        return mirrored_strategy

    monkeypatch.setattr(tf.distribute, "MirroredStrategy", session_strategy)
    code = cli.main(["train", *TINY, "--classes-per-batch", "4", "--strategy", "mirrored",
                     "--runs-dir", str(tmp_path), "--run-name", "mirrored", "--no-export",
                     "--no-plots"])
    assert code == 0, capsys.readouterr().err
    assert built == [((), {})]  # MirroredStrategy() over this machine's devices
    assert mirrored_strategy.num_replicas_in_sync == 2
    summary = json.loads((tmp_path / "mirrored" / "summary.json").read_text())
    assert summary["config"]["strategy"] == "mirrored"
    assert summary["config"]["classes_per_batch"] == 4  # 2 whole classes per replica
    assert len(summary["loss_history"]) == 1 and math.isfinite(summary["loss_history"][0])
    assert 0.0 <= summary["recall_after"]["recall@1"] <= 1.0
    assert os.path.exists(tmp_path / "mirrored" / "model.keras")


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "--epochs must be a positive integer"),
    (["--steps-per-epoch", "-1"], "--steps-per-epoch must be a positive integer"),
    (["--learning-rate", "nan"], "--learning-rate must be positive"),
    (["--loss", "PairLoss"], "Unknown loss 'PairLoss'"),
    (["--loss", "Contrastive", "--loss-args", '{"no_such": 1}'], "Contrastive:.*no_such"),
    (["--classes-per-batch", "99", "--dataset", "digits"], "--classes-per-batch=99"),
    (["--run-name", "../elsewhere"], "--run-name must be a plain folder name"),
    (["--loss-args", "[1, 2]"], "--loss-args must be a JSON object"),
    (["--width", "0"], "--width must be a positive integer"),
    (["--weight-decay", "-0.1"], "--weight-decay must be >= 0"),
    (["--backbone", "resnet50", "--width", "16"], "--width must not be given with resnet50"),
])
def test_bad_training_options_are_clear_errors(args, message, tmp_path, capsys):
    code = cli.main(["train", *args, "--runs-dir", str(tmp_path), "--no-export", "--no-plots"])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not os.listdir(tmp_path)  # nothing written for a refused run


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_rotated_classes_and_weight_decay_reach_the_run(tmp_path, capsys):
    code = cli.main(["train", *TINY, "--rotated-classes", "--weight-decay", "0.05",
                     "--runs-dir", str(tmp_path), "--run-name", "rot", "--no-export",
                     "--no-plots"])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "rot" / "summary.json").read_text())
    assert summary["config"]["rotated_classes"] is True
    assert summary["config"]["weight_decay"] == 0.05
    import keras

    model = keras.models.load_model(tmp_path / "rot" / "model.keras")
    assert type(model.optimizer).__name__ == "AdamW"
    assert float(model.optimizer.weight_decay) == pytest.approx(0.05)


def test_width_sets_the_filters_of_the_backbone():
    from keras_dml import training
    from keras_dml.training.config import TrainConfig

    assert TrainConfig().width == 32  # the default run's network
    assert TrainConfig(backbone="resnet50").width is None
    model = training.build_model(TrainConfig(width=8), (28, 28, 1))
    assert [layer.filters for layer in model.layers if hasattr(layer, "filters")] == [8, 8, 8]
    convnet = training.build_model(TrainConfig(backbone="convnet", width=4), (28, 28, 1))
    assert sorted({layer.filters for layer in convnet.layers if hasattr(layer, "filters")}) \
        == [4, 8, 16]


@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_fresh_process_loads_a_cli_run_and_fits_a_string_loss(tmp_path):
    """What a user meets: the console script's output, then `import keras_dml` alone."""
    result = _run_script(tmp_path, "train", *TINY, "--run-name", "fresh", "--no-plots",
                         "--no-export")
    assert result.returncode == 0, result.stderr
    # A quiet console: no TensorFlow start-up lines, retracing or shuffle warnings.
    for noise in ("I0000", "E0000", "absl::InitializeLog", "cuda", "retracing", "shuffle"):
        assert noise not in result.stdout + result.stderr, noise
    code = textwrap.dedent("""
        import keras, numpy as np
        import keras_dml
        model = keras.models.load_model("runs/fresh/model.keras")
        x = np.random.default_rng(0).random((20, 8, 8, 1), dtype=np.float32)
        y = np.repeat(np.arange(5), 4)
        assert model.predict(x, verbose=0).shape == (20, 16)
        model.compile(optimizer="adam", loss="keras_dml>MultiSimilarity")
        history = model.fit(x, y, batch_size=20, epochs=1, verbose=0)
        print(type(model).__name__, type(model.loss).__name__,
              np.isfinite(history.history["loss"][0]))
    """)
    env = dict(os.environ, PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["DMLModel", "MultiSimilarity", "True"]


def test_null_or_empty_preprocessing_means_none(tmp_path):
    from keras_dml.export.inputs import as_preprocessing

    sidecar = tmp_path / "sidecar.json"
    sidecar.write_text(json.dumps({"preprocessing": None}))
    assert as_preprocessing(str(sidecar)) is None
    assert as_preprocessing({}) is None and as_preprocessing({"preprocessing": {}}) is None


@pytest.mark.shared_data
@pytest.mark.slow  # a training run (test_train_prints_recall_saves_and_exports is the quick one)
def test_inshop_is_evaluated_query_against_gallery(tmp_path, capsys):
    """In-Shop's protocol: queries ranked against the gallery, not leave-one-out."""
    import glob
    import shutil

    from conftest import SHARED_DATASETS

    cub = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")
    rows = []
    for item, folder in enumerate(sorted(glob.glob(os.path.join(cub, "*")))[:5], start=1):
        for j, image in enumerate(sorted(glob.glob(os.path.join(folder, "*.jpg")))[:4]):
            rel = f"img/WOMEN/Dresses/id_{item:08d}/{j:02d}_1_front.jpg"
            os.makedirs(tmp_path / "inshop" / os.path.dirname(rel), exist_ok=True)
            shutil.copy(image, tmp_path / "inshop" / rel)
            status = "train" if item <= 2 else ("query" if j == 0 else "gallery")
            rows.append(f"{rel} id_{item:08d} {status}")
    (tmp_path / "inshop" / "list_eval_partition.txt").write_text(
        f"{len(rows)}\nimage_name item_id evaluation_status\n" + "\n".join(rows) + "\n")
    code = cli.main([
        "train", "--dataset", "inshop", "--data-dir", str(tmp_path / "inshop"),
        "--image-size", "32", "--classes-per-batch", "2", "--samples-per-class", "2",
        "--epochs", "1", "--steps-per-epoch", "2", "--runs-dir", str(tmp_path / "runs"),
        "--run-name", "inshop", "--no-export", "--no-plots",
    ])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "runs" / "inshop" / "summary.json").read_text())
    assert summary["recall_after"]["num_queries"] == 3  # the 3 query images, not 12


def test_warnings_print_as_one_command_line():
    import warnings

    from keras_dml.cli.parser import _warnings_as_lines

    saved = warnings.formatwarning
    with _warnings_as_lines("embed"):
        line = warnings.formatwarning("3 hidden files skipped", UserWarning, "somewhere.py", 12)
    assert line == "keras-dml embed: warning: 3 hidden files skipped\n"
    assert warnings.formatwarning is saved
