"""Training on several devices and machines: strategy choice and resumable backups.

`DMLModel.fit` works under `tf.distribute.MultiWorkerMirroredStrategy` (plain Keras 3
`fit` does not: keras-team/keras#20585); see docs/distributed.md for the set-up. The
strategies are TensorFlow's (`make_strategy` needs it); on JAX, data-parallel training
goes through `keras.distribution.DataParallel` instead.
"""

import json
import os

import keras

from keras_dml import backend

__all__ = ["BackupAndRestore", "cluster_workers", "is_chief", "make_strategy", "task_name",
           "training_batches"]

STRATEGIES = ("auto", "mirrored", "multiworker")


def cluster_workers(tf_config=None):
    """Number of workers (chief included) named by TF_CONFIG; 0 when it is unset."""
    text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
    if not text.strip():
        return 0
    try:
        cluster = json.loads(text).get("cluster", {})
    except (ValueError, AttributeError):
        raise ValueError(f"TF_CONFIG is not a JSON object with a 'cluster': {text!r}") from None
    return sum(len(cluster.get(kind, [])) for kind in ("chief", "worker"))


def make_strategy(name="auto"):
    """The `tf.distribute` strategy `keras-dml train --strategy` names.

    - `"multiworker"`: `MultiWorkerMirroredStrategy` over the cluster in TF_CONFIG
      (required), each worker mirroring over its local GPUs (or its CPU).
    - `"mirrored"`: `MirroredStrategy` over this machine's GPUs (the CPU without).
    - `"auto"`: multiworker when TF_CONFIG names more than one worker, mirrored when
      there are several GPUs, else TensorFlow's default (one device).
    """
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}.")
    tf = backend.require_tensorflow("tf.distribute (keras_dml.training.distribute.make_strategy)")
    workers = cluster_workers()
    if name == "multiworker" and workers == 0:
        raise ValueError("--strategy multiworker reads the cluster from the TF_CONFIG "
                         "environment variable, which is not set (docs/distributed.md).")
    if name == "multiworker" or (name == "auto" and workers > 1):
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored" or len(tf.config.list_logical_devices("GPU")) > 1:
        return tf.distribute.MirroredStrategy()
    return tf.distribute.get_strategy()


def task_name(tf_config=None):
    """This process's task in TF_CONFIG as `"<type>-<index>"` (`"worker-0"` when unset)."""
    text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
    if not text.strip():
        return "worker-0"
    task = json.loads(text).get("task", {})
    return f"{task.get('type', 'worker')}-{int(task.get('index', 0))}"


def is_chief(tf_config=None):
    """Whether this task writes the run's outputs: the chief, or worker 0 of a
    cluster without a chief (every process outside multi-worker training)."""
    text = os.environ.get("TF_CONFIG", "") if tf_config is None else tf_config
    if not text.strip():
        return True
    config = json.loads(text)
    has_chief = bool(config.get("cluster", {}).get("chief"))
    return task_name(text) == ("chief-0" if has_chief else "worker-0")


def training_batches(strategy, source, classes_per_batch, samples_per_class, *, seed,
                     **kwargs):
    """C x k training batches for `strategy`: read per worker under a multi-worker
    strategy (`distributed_class_balanced_batches`), else one pipeline split over
    the local replicas (`class_balanced_batches`)."""
    from keras_dml import data

    if cluster_workers() > 1:
        return data.distributed_class_balanced_batches(
            strategy, source, classes_per_batch, samples_per_class, seed=seed, **kwargs)
    return data.class_balanced_batches(
        source, classes_per_batch, samples_per_class, seed=seed,
        num_replicas=strategy.num_replicas_in_sync, **kwargs)


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore` for multi-worker runs, resuming the data too.

    - Each worker backs up to its own `backup_dir/<task type>-<index>` (their weights are
      identical, and two workers must never write one file), and restores from it.
    - With `stream=` a dataset from `distributed_class_balanced_batches`, the restored
      run continues the batch stream after the last backed-up step (epoch x
      `steps_per_epoch`), so a killed-and-restarted run trains on the batches the
      uninterrupted run would have seen.

    The backup holds the model's weights (loss-owned ones such as proxies included)
    and the optimizer state. Backups are taken at epoch ends (`save_freq="epoch"`,
    the default): Keras restores the epoch, not a position inside it, so use short
    epochs (`steps_per_epoch`) when preemptions are frequent.

    Args:
        backup_dir: Folder shared by the workers (each uses its own sub-folder).
        stream: The training `DistributedDataset` from
            `keras_dml.data.distributed_class_balanced_batches`. Defaults to `None`
            (the data restarts from its first batch on resume).
        **kwargs: `save_freq`, `double_checkpoint`, `delete_checkpoint` as for Keras'.
    """

    def __init__(self, backup_dir, stream=None, **kwargs):
        if kwargs.get("save_freq", "epoch") != "epoch":
            raise ValueError("BackupAndRestore backs up at epoch ends (save_freq='epoch'): "
                             "Keras resumes at an epoch boundary.")
        self.position = None
        if stream is not None:
            from keras_dml.data.distributed import worker_stream_start

            self.position = worker_stream_start(stream)
            if self.position is None:
                raise ValueError("BackupAndRestore(stream=...) takes the dataset returned by "
                                 "keras_dml.data.distributed_class_balanced_batches.")
        self.shared_dir = backup_dir
        super().__init__(os.path.join(str(backup_dir), task_name()), **kwargs)

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        epoch = self.restored_epoch()
        if self.position is not None:
            self.position.start = epoch * int(self.params.get("steps") or 0)

    def restored_epoch(self):
        """The epoch the last backup ends with (0 without a backup)."""
        path = os.path.join(self.backup_dir, "training_metadata.json")
        if not os.path.exists(path):
            return 0
        with open(path) as f:
            return int(json.load(f)["epoch"])
