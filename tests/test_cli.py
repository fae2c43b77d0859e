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


def test_bad_loss_args_are_a_clear_error(tmp_path, capsys):
    code = cli.main(["train", "--loss-args", "[1, 2]", "--runs-dir", str(tmp_path)])
    assert code == 2
    assert "--loss-args must be a JSON object" in capsys.readouterr().err


def test_console_script_help_documents_the_options():
    result = subprocess.run([sys.executable, "-m", "keras_dml.cli", "train", "--help"],
                            capture_output=True, text=True, check=True)
    for option in ("--dataset", "--loss", "--epochs", "--export-dir", "--data-dir"):
        assert option in result.stdout
