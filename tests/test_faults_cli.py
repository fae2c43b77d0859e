"""Faults through the command: a killed `keras-dml train` resumes; bad images named or skipped."""

import csv
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

from keras_dml import cli
from test_faults_data import _truncate, _write_cub
from test_faults_resume import _env

pytestmark = pytest.mark.faults

FAST = ["--dataset", "digits", "--epochs", "2", "--steps-per-epoch", "2", "--no-export",
        "--no-plots", "--classes-per-batch", "2", "--samples-per-class", "2"]


@pytest.mark.slow  # kill and resume of a training run
def test_a_killed_train_run_resumes_with_its_history(tmp_path, capsys):
    # Killed after epoch 1 is logged to history.csv but before its backup is written:
    # the resume starts from the backup of epoch 0 and must not log epoch 1 twice.
    run_dir = tmp_path / "runs" / "killed"
    worker = subprocess.run(
        [sys.executable, os.path.join(os.path.dirname(__file__), "fault_worker.py"),
         "cli-killed-before-backup", "2", "train", *FAST, "--run-name", "killed",
         "--runs-dir", str(tmp_path / "runs")], env=_env(), capture_output=True, text=True,
        timeout=300)
    assert worker.returncode == -signal.SIGKILL, worker.stderr[-2000:]
    assert not (run_dir / "summary.json").exists()
    first = list(csv.DictReader(open(run_dir / "history.csv")))
    assert [r["epoch"] for r in first] == ["0", "1"]
    assert cli.main(["train", "--resume", str(run_dir)]) == 0
    assert f"resuming {run_dir}" in capsys.readouterr().out
    rows = list(csv.DictReader(open(run_dir / "history.csv")))
    assert [r["epoch"] for r in rows] == ["0", "1"] and rows[0] == first[0]
    summary = json.load(open(run_dir / "summary.json"))
    assert summary["loss_history"][0] == float(first[0]["loss"])
    assert len(summary["loss_history"]) == 2 and os.path.exists(summary["model"])


def test_resume_of_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["train", "--resume", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


@pytest.mark.slow  # a training run
def test_skip_bad_images_on_the_command_line(tmp_path, capfd):
    paths = _write_cub(str(tmp_path / "cub"), classes=4, per_class=6)
    _truncate(paths[1])  # a training class (the first half)
    args = ["train", *FAST, "--dataset", "cub200", "--data-dir", str(tmp_path / "cub"),
            "--image-size", "16", "--backbone", "convnet", "--runs-dir",
            str(tmp_path / "runs")]
    assert cli.main(args + ["--run-name", "strict"]) == 2
    assert "img_1.jpg" in capfd.readouterr().err
    assert cli.main(args + ["--run-name", "skipping", "--skip-bad-images"]) == 0
    assert capfd.readouterr().err.count("keras_dml.data: skipped ") == 1
    summary = json.load(open(tmp_path / "runs" / "skipping" / "summary.json"))
    assert np.isfinite(summary["loss_history"]).all()
    assert summary["skipped_images"] == [paths[1]]
    assert summary["skipped_reasons"] == {paths[1]: "cannot be decoded"}
    # the bad batch came after epoch 1's backup: the failed run is kept, marked, resumable
    failed = json.load(open(tmp_path / "runs" / "strict" / "failed.json"))
    assert "img_1.jpg" in failed["error"] and "--resume" in failed["resume"]


def test_resume_drops_history_rows_of_epochs_not_backed_up(tmp_path):
    from keras_dml.training.run_folder import drop_history_after as _drop_history_after

    path = tmp_path / "history.csv"
    path.write_text("epoch,loss\n0,1.5\n1,1.2\n2,1.1\n")
    _drop_history_after(str(path), 2)  # the last backup holds 2 epochs: epoch 2 is redone
    assert path.read_text() == "epoch,loss\n0,1.5\n1,1.2\n"
    _drop_history_after(str(path), 2)  # nothing to drop: unchanged
    assert path.read_text() == "epoch,loss\n0,1.5\n1,1.2\n"
