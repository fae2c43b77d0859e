"""`keras-dml train` on every class folder: --test-classes 0 (no evaluation, said so)
or --test-dir DIR|CSV (evaluated on other images); and the offline advice for an
Applications backbone names only flags that work."""

import json
import os

import numpy as np
import pytest

from keras_dml import cli, datasets
from keras_dml.training.config import TrainConfig
from keras_dml.training.report import ConsoleReport
from test_index_catalogue import _png

TINY = ["--epochs", "1", "--steps-per-epoch", "1", "--classes-per-batch", "2",
        "--samples-per-class", "2", "--image-size", "16", "--no-export", "--no-plots"]


def _folder(root, classes, seed=0, per_class=3):
    """root/<class>/<image>.png, `per_class` images of each of `classes`."""
    for number, name in enumerate(classes):
        for i in range(per_class):
            _png(root / name / f"{i}.png", (70 * number, 100, 220 - 70 * number), seed + i)
    return root


def test_test_classes_zero_trains_every_class(tmp_path):
    splits = datasets.from_directory(_folder(tmp_path, ["a", "b", "c"]), test_classes=0)
    assert splits.train.num_classes == 3 and len(splits.train) == 9 and len(splits.test) == 0
    with pytest.raises(ValueError, match=r"from 0 to 2 .* got 3"):
        datasets.from_directory(tmp_path, test_classes=3)


def test_test_dir_and_no_evaluation_in_the_config():
    assert not TrainConfig(dataset="folder", data_dir="d", test_classes=0).evaluates
    given = TrainConfig(dataset="folder", data_dir="d", test_dir="t")
    assert given.evaluates and given.test_classes == 0
    assert TrainConfig(dataset="folder", data_dir="d").evaluates
    with pytest.raises(ValueError, match="test_classes must not be given"):
        TrainConfig(dataset="folder", data_dir="d", test_dir="t", test_classes=0.3)
    with pytest.raises(ValueError, match="test_dir is for your own images"):
        TrainConfig(dataset="digits", test_dir="t")


def test_a_run_without_evaluation_says_so(tmp_path, capsys):
    summary = {"recall_before": None, "recall_after": None, "seconds": 3.0,
               "train_seconds": 2.0, "run_dir": str(tmp_path), "verdict": "",
               "evaluation": "none (--test-classes 0 without --test-dir; every class trains)"}
    ConsoleReport().finish(summary)
    out = capsys.readouterr().out
    assert "evaluation: none (--test-classes 0 without --test-dir" in out
    assert "before training" not in out and "R@1" not in out


@pytest.mark.slow  # two tiny training runs
def test_train_on_every_class_with_and_without_a_test_dir(tmp_path, capsys):
    data = _folder(tmp_path / "train", ["ant", "bee", "cow"])
    test = _folder(tmp_path / "test", ["dog", "elk"], seed=20, per_class=5)  # R@8: > 8
    args = ["train", "--data-dir", str(data), "--backbone", "convnet", *TINY,
            "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(args + ["--test-classes", "0", "--run-name", "all"]) == 0
    out = capsys.readouterr().out
    assert "3 training classes (9 images), no test images (--test-classes 0 without " \
        "--test-dir): the run measures no Recall@K" in out
    assert "before training" not in out and "R@1" not in out
    summary = json.load(open(tmp_path / "runs" / "all" / "summary.json"))
    assert summary["evaluation"].startswith("none") and summary["recall_after"] is None
    assert summary["recall_before"] is None and summary["verdict"] == ""
    assert os.path.isfile(summary["model"])

    assert cli.main(args + ["--test-dir", str(test), "--run-name", "other"]) == 0
    out = capsys.readouterr().out
    assert f"3 training classes (9 images), 2 test classes (10 images, --test-dir {test})" in out
    assert "before training R@1" in out and "after training  R@1" in out
    summary = json.load(open(tmp_path / "runs" / "other" / "summary.json"))
    assert str(test) in summary["evaluation"] and summary["recall_after"]["num_queries"] == 10
    assert json.load(open(tmp_path / "runs" / "other" / "class_names.json")) == {
        "train": ["ant", "bee", "cow"], "test": ["dog", "elk"]}

    code = cli.main(args + ["--test-dir", str(test), "--test-classes", "0.5"])
    assert code == 2
    assert "--test-dir" in capsys.readouterr().err


# -- offline: an Applications backbone whose ImageNet weights cannot be downloaded ----

@pytest.fixture
def offline(tmp_path, monkeypatch):
    """Keras' cache in an empty folder, and no network for `get_file`."""
    import urllib.error

    from keras.src.backend import config
    from keras.src.utils import file_utils

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(config, "_KERAS_DIR", str(tmp_path / "keras_home"))
    monkeypatch.setattr(file_utils, "urlretrieve", no_network)


@pytest.mark.slow  # three tiny training runs, one of MobileNetV3Small
def test_the_offline_advice_names_only_flags_that_run(offline, tmp_path, capsys):
    import keras

    data = _folder(tmp_path / "photos", ["ant", "bee", "cow", "dog"], per_class=5)
    args = ["train", "--data-dir", str(data), "--test-classes", "2", *TINY,
            "--image-size", "32", "--runs-dir", str(tmp_path / "runs")]
    assert cli.main(args + ["--backbone", "MobileNetV3Small"]) == 2
    message = capsys.readouterr().err
    assert "could not download it" in message and "--weights none" not in message.split(
        "refuses")[0]
    assert "--weights PATH" in message and "--backbone cnn3 or convnet" in message
    # the refusal the advice steers clear of
    assert cli.main(args + ["--backbone", "MobileNetV3Small", "--weights", "none"]) == 2
    assert "from random weights collapses" in capsys.readouterr().err
    # each suggestion runs, without a download
    assert cli.main(args + ["--backbone", "convnet", "--run-name", "scratch"]) == 0
    weights = str(tmp_path / "mobilenet.weights.h5")
    keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                        input_shape=(32, 32, 3)).save_weights(weights)
    assert cli.main(args + ["--backbone", "MobileNetV3Small", "--weights", weights,
                            "--run-name", "local"]) == 0, capsys.readouterr().err
    summary = json.load(open(tmp_path / "runs" / "local" / "summary.json"))
    assert summary["config"]["weights"] == weights
    assert np.isfinite(summary["loss_history"]).all()
