"""Faults: SIGKILL and resume, crash-safe and corrupt backups (keras_dml.callbacks.backup)."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import fault_worker
from keras_dml import data
from keras_dml.callbacks.backup import BackupError, TrainingBackup, complete_backups, read_state

pytestmark = pytest.mark.faults

WORKER = os.path.join(os.path.dirname(__file__), "fault_worker.py")


def _env():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _fit(backup_dir, epochs, **kwargs):
    model, batches = fault_worker.build()
    backup = TrainingBackup(backup_dir, stream=batches, **kwargs)
    model.fit(batches, epochs=epochs, steps_per_epoch=fault_worker.STEPS,
              callbacks=[backup], verbose=0)
    return model, backup


@pytest.mark.slow  # kill and resume
def test_sigkill_mid_epoch_then_resume_reproduces_the_loss_trajectory(tmp_path):
    reference = _fit(str(tmp_path / "reference"), 4)[1].history["loss"]
    backup_dir = str(tmp_path / "killed")
    # Killed after batch 1 of epoch 2 (0-based): epochs 0 and 1 are backed up.
    run = subprocess.run([sys.executable, WORKER, "train", backup_dir, "unused", "4", "2", "1"],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stderr[-2000:]
    assert [e for e, _ in complete_backups(backup_dir)] == [2]
    _, resumed = _fit(backup_dir, 4)
    assert resumed.resumed_from == 2
    assert resumed.history["loss"] == reference  # exactly, not approximately


def test_resume_restarts_the_stream_at_the_saved_batch(tmp_path):
    x = np.zeros((40, 2), "float32")
    y = np.repeat(np.arange(8), 5)
    ds = data.class_balanced_batches((x, y), 2, 2, seed=3)
    first = [b[1].numpy() for b in ds.take(7)]
    data.pipeline.stream_position(ds).start = 5
    assert all((a == b).all() for a, b in zip(first[5:], [b[1].numpy() for b in ds.take(2)]))
    started = data.class_balanced_batches((x, y), 2, 2, seed=3, start_step=5)
    assert all((a == b).all() for a, b in zip(first[5:], [b[1].numpy() for b in started.take(2)]))


@pytest.mark.slow
def test_a_crash_at_any_stage_of_a_save_leaves_a_usable_backup(tmp_path, monkeypatch):
    backup_dir = str(tmp_path / "b")
    model, backup = _fit(backup_dir, 1)
    saved = model.get_weights()
    module = sys.modules["keras_dml.callbacks.backup"]

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    stages = {"weights": (model, "save_weights"), "state": (module, "_write_file"),
              "replace": (os, "replace"), "cleanup": (module.shutil, "rmtree")}
    for epoch, (stage, target) in enumerate(stages.items(), start=2):
        with monkeypatch.context() as patch:
            patch.setattr(*target, crash)
            with pytest.raises(KeyboardInterrupt):
                backup.save(epoch)
        epochs = [e for e, _ in complete_backups(backup_dir)]
        assert epochs[-1] == (epoch if stage == "cleanup" else 1), stage
        restore = _restore(backup_dir)
        assert restore.resumed_from == epochs[-1]
        assert all((a == b).all() for a, b in zip(restore.model.get_weights(), saved))
        assert not [n for n in os.listdir(backup_dir) if n.startswith(".partial")]


@pytest.mark.slow  # kill and resume
def test_sigkill_at_random_moments_never_leaves_a_corrupt_backup(tmp_path):
    rng = random.Random(0)
    backup_dir = str(tmp_path / "b")
    for _ in range(1):  # each kill costs a process start (~10 s); more in the note
        worker = subprocess.Popen([sys.executable, WORKER, "save-forever", backup_dir],
                                  env=_env(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True)
        assert worker.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.4))
        worker.send_signal(signal.SIGKILL)
        worker.wait()
        epoch, folder = complete_backups(backup_dir)[-1]
        assert read_state(folder)["epoch"] == epoch
        # Loads the weights: a corrupt file would raise.
        assert _restore(backup_dir).resumed_from == epoch


def _restore(backup_dir, build=fault_worker.build):
    model, batches = build()
    restore = TrainingBackup(backup_dir, stream=batches)
    restore.set_model(model)
    restore.on_train_begin()
    return restore


def test_a_corrupt_backup_is_a_clear_error_not_a_restart(tmp_path):
    backup_dir = str(tmp_path / "b")
    _fit(backup_dir, 1)
    _, folder = complete_backups(backup_dir)[-1]
    weights = os.path.join(folder, "model.weights.h5")
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(BackupError, match="corrupt.*model.weights.h5|model.weights.h5.*corrupt"):
        _restore(backup_dir)
    with open(os.path.join(folder, "state.json"), "w") as f:
        f.write('{"epoch": 1')
    with pytest.raises(BackupError, match="corrupt: cannot read state.json"):
        _restore(backup_dir)


def test_a_backup_of_another_model_or_stream_is_a_clear_error(tmp_path):
    import keras
    from keras_dml import losses
    from keras_dml.models import DMLModel

    backup_dir = str(tmp_path / "b")
    _fit(backup_dir, 1)

    def wider():
        model, batches = fault_worker.build()
        inputs = keras.Input((12,))
        other = DMLModel(inputs, keras.layers.Dense(9)(keras.layers.Dense(16)(inputs)))
        other.compile("adam", losses.ProxyAnchor(num_classes=10))
        return other, batches

    with pytest.raises(BackupError, match="another model"):
        _restore(backup_dir, wider)

    def reseeded():
        model, _ = fault_worker.build()
        x, y = np.zeros((200, 12), "float32"), np.repeat(np.arange(10), 20)
        return model, data.class_balanced_batches((x, y), 4, 3, seed=2)

    with pytest.raises(BackupError, match="stream"):
        _restore(backup_dir, reseeded)
    with open(os.path.join(complete_backups(backup_dir)[-1][1], "state.json")) as f:
        assert json.load(f)["position"] == fault_worker.STEPS
