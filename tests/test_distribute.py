"""Multi-worker training on localhost: two worker processes, TF_CONFIG with free ports.

Each test starts real `MultiWorkerMirroredStrategy` workers (tests/multiworker_worker.py)
and compares their weights with the single-process run on the same global batches.
"""

import json
import os
import signal
import socket
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import data
from keras_dml.data.distributed import replica_slices, worker_stream_start
from keras_dml.training import distribute

sys.path.insert(0, os.path.dirname(__file__))
import multiworker_worker as worker  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT = 240


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start_workers(tmp_path, name, args, extra=None):
    """Start two workers; `extra[i]` are worker i's additional arguments."""
    cluster = [f"localhost:{p}" for p in _free_ports(2)]
    procs = []
    for index in range(2):
        env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
                   TF_CONFIG=json.dumps({"cluster": {"worker": cluster},
                                         "task": {"type": "worker", "index": index}}))
        out = tmp_path / f"{name}-{index}.npz"
        log = open(tmp_path / f"{name}-{index}.log", "w")
        command = [sys.executable, os.path.join(ROOT, "tests", "multiworker_worker.py"),
                   "--out", str(out)] + args + list((extra or {}).get(index, []))
        procs.append((subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       cwd=tmp_path), out, tmp_path / f"{name}-{index}.log"))
    return procs


def _wait(procs):
    results = []
    for proc, out, log in procs:
        code = proc.wait(timeout=TIMEOUT)
        assert code == 0, f"worker failed ({code}):\n{log.read_text()[-3000:]}"
        weights = np.load(out)
        results.append(([weights[f"arr_{i}"] for i in range(len(weights.files))],
                        json.loads(open(str(out) + ".json").read())))
    return results


def _single_process(loss, epochs, steps):
    model, history = worker.train(loss, epochs, steps)
    return model.get_weights(), history.history["loss"]


def _assert_same(a, b, atol=1e-5):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=atol)


@pytest.mark.slow  # multi-worker run
def test_two_workers_train_like_one_process_on_the_global_batch(tmp_path):
    checkpoints = tmp_path / "checkpoints"
    procs = _start_workers(tmp_path, "ms", ["--epochs", "2", "--steps", "2",
                                            "--checkpoint", str(checkpoints)])
    expected, expected_loss = _single_process("multi_similarity", 2, 2)
    (w0, info0), (w1, info1) = _wait(procs)
    assert info0["replicas"] == 2
    _assert_same(w0, w1, atol=0)  # every worker holds the same weights
    _assert_same(w0, expected)
    np.testing.assert_allclose(info0["loss"], expected_loss, rtol=1e-5)
    start = worker.build("multi_similarity").get_weights()
    assert max(np.abs(a - b).max() for a, b in zip(expected, start)) > 1e-3  # it learned
    # keras.callbacks.ModelCheckpoint under the multi-worker strategy: each worker saved
    # every epoch to its own file; the last one loads with the trained weights.
    assert sorted(os.listdir(checkpoints)) == [f"worker-{i}-{e}.keras"
                                               for i in range(2) for e in (1, 2)]
    for index, weights in enumerate((w0, w1)):
        saved = keras.models.load_model(checkpoints / f"worker-{index}-2.keras")
        _assert_same(saved.get_weights(), weights, atol=0)


@pytest.mark.slow  # multi-worker kill and resume
def test_killed_worker_resumes_from_the_backup_with_proxies_optimizer_and_stream(tmp_path):
    backup = tmp_path / "backup"
    common = ["--loss", "proxy_anchor", "--epochs", "4", "--steps", "2",
              "--backup", str(backup)]
    # worker 1 dies by SIGKILL in the middle of epoch 2 (its 5th step), after the
    # backup of epoch 1; its peer blocks in the next all-reduce and the job is
    # restarted as a whole, as a cluster manager does.
    procs = _start_workers(tmp_path, "killed", common, extra={1: ["--kill-at", "5"]})
    victim, survivor = procs[1][0], procs[0][0]
    assert victim.wait(timeout=TIMEOUT) == -signal.SIGKILL, procs[1][2].read_text()[-3000:]
    survivor.kill()
    survivor.wait(timeout=TIMEOUT)
    for index in range(2):
        metadata = backup / f"worker-{index}" / "training_metadata.json"
        assert json.loads(metadata.read_text())["epoch"] == 2

    (w0, info0), (w1, info1) = _wait(_start_workers(tmp_path, "resumed", common))
    expected, expected_loss = _single_process("proxy_anchor", 4, 2)
    assert info0["epochs_trained"] == 2  # epochs 2 and 3 only
    _assert_same(w0, w1, atol=0)
    _assert_same(w0, expected)  # proxies and Adam moments restored, stream continued
    np.testing.assert_allclose(info0["loss"], expected_loss[2:], rtol=1e-5)
    assert not (backup / "worker-0").exists()  # removed once training completed


def test_each_pipeline_reads_its_replicas_share_of_the_single_process_batch(mirrored_strategy):
    x, y = worker.source()
    expected = next(iter(data.class_balanced_batches((x, y), 8, 3, seed=5)))
    pieces = []
    for pipeline in range(2):
        start, stop, count = replica_slices(24, 4, pipeline, 2)
        assert count == 2
        pieces.append(np.arange(24)[start:stop])
    assert np.array_equal(np.concatenate(pieces), np.arange(24))
    strategy = mirrored_strategy
    stream = data.distributed_class_balanced_batches(strategy, (x, y), 8, 3, seed=5)
    xb, yb = next(iter(stream))
    got_y = np.concatenate([v.numpy() for v in strategy.experimental_local_results(yb)])
    got_x = np.concatenate([v.numpy() for v in strategy.experimental_local_results(xb)])
    np.testing.assert_array_equal(got_y, expected[1].numpy())
    np.testing.assert_array_equal(got_x, expected[0].numpy())
    assert len(set(got_y[:12]) & set(got_y[12:])) == 0  # whole classes per replica


def test_a_distributed_stream_carries_its_position_to_the_backup(mirrored_strategy, tmp_path):
    x, y = worker.source()
    stream = data.distributed_class_balanced_batches(mirrored_strategy, (x, y), 8, 3, seed=5,
                                                     start_step=2)
    position = worker_stream_start(stream)
    assert (position.start, position.seed, position.batch_size) == (2, 5, 24)
    assert distribute.BackupAndRestore(tmp_path, stream=stream).position is position
    assert worker_stream_start(data.class_balanced_batches((x, y), 8, 3, seed=5)) is None


def test_distributed_batches_need_a_shared_seed_and_whole_classes(mirrored_strategy):
    x, y = worker.source()
    with pytest.raises(ValueError, match="integer seed"):
        data.distributed_class_balanced_batches(mirrored_strategy, (x, y), 8, 3, seed=None)
    with pytest.raises(ValueError, match="divisible"):
        data.distributed_class_balanced_batches(mirrored_strategy, (x, y), 7, 3, seed=1)


def test_strategy_choice_reads_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert distribute.cluster_workers() == 0
    with pytest.raises(ValueError, match="TF_CONFIG"):
        distribute.make_strategy("multiworker")
    with pytest.raises(ValueError, match="strategy must be one of"):
        distribute.make_strategy("tpu")
    assert distribute.make_strategy("auto") is tf.distribute.get_strategy()
    config = {"cluster": {"worker": ["a:1", "b:2"], "chief": ["c:3"]}}
    assert distribute.cluster_workers(json.dumps(config)) == 3
    with pytest.raises(ValueError, match="TF_CONFIG is not"):
        distribute.cluster_workers("[1, 2]")


def test_each_task_backs_up_to_its_own_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}))
    assert distribute.BackupAndRestore(tmp_path).backup_dir == str(tmp_path / "worker-1")
    monkeypatch.delenv("TF_CONFIG")
    assert distribute.task_name() == "worker-0"
    with pytest.raises(ValueError, match="distributed_class_balanced_batches"):
        distribute.BackupAndRestore(tmp_path, stream=tf.data.Dataset.range(3))
