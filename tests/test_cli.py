"""The `keras-dml` command, end to end on the bundled digits (a short run)."""

import json
import os
import subprocess
import sys

import pytest

from keras_dml import cli


def test_train_prints_recall_saves_and_exports(tmp_path, capsys):
    code = cli.main([
        "train", "--epochs", "1", "--steps-per-epoch", "3", "--embedding-dim", "16",
        "--runs-dir", str(tmp_path / "runs"), "--export-dir", str(tmp_path / "savedmodels"),
        "--run-name", "smoke", "--no-plots",
    ])
    out = capsys.readouterr().out
    assert code == 0
    assert "before training" in out and "after training" in out and "R@8" in out
    summary = json.loads((tmp_path / "runs" / "smoke" / "summary.json").read_text())
    assert 0.0 <= summary["recall_after"]["recall@1"] <= 1.0
    assert os.path.exists(tmp_path / "runs" / "smoke" / "model.keras")
    assert os.path.exists(tmp_path / "savedmodels" / "smoke" / "1" / "saved_model.pb")


def test_unknown_loss_is_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "--loss", "NoSuchLoss", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "Unknown loss 'NoSuchLoss'" in capsys.readouterr().err


def test_proxy_loss_gets_the_training_class_count(tmp_path, capsys):
    code = cli.main([
        "train", "--loss", "ProxyAnchor", "--epochs", "1", "--steps-per-epoch", "2",
        "--runs-dir", str(tmp_path / "runs"), "--run-name", "proxies", "--no-export",
        "--no-plots",
    ])
    assert code == 0, capsys.readouterr().err
    summary = json.loads((tmp_path / "runs" / "proxies" / "summary.json").read_text())
    assert summary["config"]["loss"] == "ProxyAnchor"
    from keras_dml import training

    assert training.make_loss("ProxyNCA", num_classes=5).num_classes == 5
    assert training.make_loss("ProxyNCA", {"num_classes": 3}, num_classes=5).num_classes == 3
    assert training.make_loss("Margin", num_classes=5).num_classes is None  # optional: global


@pytest.mark.parametrize("args, message", [
    (["--epochs", "0"], "epochs must be a positive integer"),
    (["--steps-per-epoch", "-1"], "steps_per_epoch must be a positive integer"),
    (["--learning-rate", "nan"], "learning_rate must be positive"),
    (["--loss", "PairLoss"], "Unknown loss 'PairLoss'"),
    (["--loss", "Contrastive", "--loss-args", '{"no_such": 1}'], "Contrastive:.*no_such"),
    (["--classes-per-batch", "99"], "classes_per_batch=99"),
])
def test_bad_training_options_are_clear_errors(args, message, tmp_path, capsys):
    import re

    code = cli.main(["train", *args, "--runs-dir", str(tmp_path), "--no-export", "--no-plots"])
    assert code == 2
    assert re.search(message, capsys.readouterr().err)


def test_bad_loss_args_are_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "--loss-args", "[1, 2]", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "--loss-args must be a JSON object" in capsys.readouterr().err


def test_console_script_help_documents_the_options():
    result = subprocess.run([sys.executable, "-m", "keras_dml.cli", "train", "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--dataset", "--loss", "--epochs", "--export-dir", "--data-dir"):
        assert option in result.stdout


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
