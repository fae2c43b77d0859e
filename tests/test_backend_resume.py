"""Exact resume on the running Keras backend (TensorFlow, JAX or PyTorch): a run killed
mid-epoch and resumed from its `TrainingBackup` ends with the weights and the loss
history of an uninterrupted run, in Python and through `keras-dml train --resume`."""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest

import fault_worker
from keras_dml.backend.augmentation import training_call
from keras_dml.callbacks.backup import BackupError, TrainingBackup, complete_backups

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

WORKER = os.path.join(os.path.dirname(__file__), "fault_worker.py")
STREAMS = ["arrays", pytest.param("tfdata", marks=pytest.mark.requires("tensorflow"))]
FAST = ["--dataset", "digits", "--epochs", "2", "--steps-per-epoch", "3", "--no-export",
        "--no-plots", "--classes-per-batch", "2", "--samples-per-class", "2"]
# The augmentation of each batch is drawn from the seed and the batch's step (in tf.data
# on TensorFlow, on the NumPy batches elsewhere), so a resume replays it.
AUGMENT = ["--augment-shift", "1"]


def _env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _fit(backup_dir, epochs, stream):
    model, batches = fault_worker.build(stream)
    backup = TrainingBackup(backup_dir, stream=batches)
    model.fit(batches, epochs=epochs, steps_per_epoch=fault_worker.STEPS,
              callbacks=[backup], verbose=0)
    return model, backup


def _assert_same_weights(model, other):
    for a, b in zip(model.get_weights(), other.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # three fits (compiled on JAX)
def test_a_resumed_fit_equals_an_uninterrupted_one(tmp_path):
    # dropout, a step-seeded augmentation and proxies: every state a resume restores
    reference, full = _fit(str(tmp_path / "reference"), 3, "arrays")
    _fit(str(tmp_path / "stopped"), 2, "arrays")
    resumed, backup = _fit(str(tmp_path / "stopped"), 3, "arrays")
    assert backup.resumed_from == 2
    assert backup.history["loss"] == full.history["loss"]  # exactly
    _assert_same_weights(resumed, reference)


@pytest.mark.slow  # two fits
def test_a_backup_with_other_seed_states_is_a_clear_error(tmp_path):
    _fit(str(tmp_path / "b"), 1, "arrays")
    _, folder = complete_backups(str(tmp_path / "b"))[-1]
    state = json.load(open(os.path.join(folder, "state.json")))
    state["seeds"] = state["seeds"][1:]
    json.dump(state, open(os.path.join(folder, "state.json"), "w"))
    with pytest.raises(BackupError, match="random seed states"):
        _fit(str(tmp_path / "b"), 2, "arrays")


def test_step_seeded_augmentation_depends_on_the_step_only():
    import keras

    x = np.zeros((4, 6), "float32")
    first, again = (training_call(keras.layers.GaussianNoise(1.0, seed=3)) for _ in range(2))
    a5 = first(x, 5)
    first(x, 6)
    np.testing.assert_array_equal(first(x, 5), a5)
    np.testing.assert_array_equal(again(x, 5), a5)
    assert not np.array_equal(first(x, 6), a5)


@pytest.mark.slow  # a process killed and resumed
@pytest.mark.parametrize("stream", STREAMS)
def test_sigkill_mid_epoch_then_resume_equals_an_uninterrupted_run(stream, tmp_path):
    reference, full = _fit(str(tmp_path / "reference"), 4, stream)
    backup_dir = str(tmp_path / "killed")
    command = "train-arrays" if stream == "arrays" else "train"
    # Killed after batch 1 of epoch 2 (0-based): epochs 0 and 1 are backed up.
    run = subprocess.run([sys.executable, WORKER, command, backup_dir, "unused", "4", "2", "1"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert [e for e, _ in complete_backups(backup_dir)] == [2]
    resumed, backup = _fit(backup_dir, 4, stream)
    assert backup.resumed_from == 2
    assert backup.history["loss"] == full.history["loss"]  # exactly, not approximately
    _assert_same_weights(resumed, reference)


def _train(*args):
    """`keras-dml train ARGS` in its own process (one device, as users run it)."""
    run = subprocess.run([sys.executable, "-m", "keras_dml.cli", "train", *args], env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.slow  # three keras-dml train runs
def test_a_killed_train_run_resumes_to_the_uninterrupted_result(tmp_path):
    runs = str(tmp_path / "runs")
    _train(*FAST, *AUGMENT, "--run-name", "whole", "--runs-dir", runs)
    worker = subprocess.run(
        [sys.executable, WORKER, "cli-killed-before-backup", "2", "train", *FAST, *AUGMENT,
         "--run-name", "killed", "--runs-dir", runs], env=_env(), capture_output=True,
        text=True, timeout=600)
    assert worker.returncode == -signal.SIGKILL, worker.stderr[-2000:]
    assert "epoch backups skipped" not in worker.stdout
    killed = os.path.join(runs, "killed")
    assert f"resuming {killed}" in _train("--resume", killed)
    whole = json.load(open(os.path.join(runs, "whole", "summary.json")))
    again = json.load(open(os.path.join(killed, "summary.json")))
    assert again["loss_history"] == whole["loss_history"]  # exactly
    import keras

    _assert_same_weights(keras.saving.load_model(again["model"]),
                         keras.saving.load_model(whole["model"]))
