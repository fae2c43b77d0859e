"""`TrainingBackup`: crash-safe, exact resume of `fit` after the process is killed.

Each backup is a folder `epoch-<n>/` (the model's weights with its optimizer
and loss-owned weights such as proxies, and `state.json`: the epoch, the
position of the batch stream, the states of the model's random seed generators,
the history, a fingerprint of the model). It works alike on every Keras backend. It is
written under a temporary name and renamed into place only when complete
(`os.replace` is atomic), then the older backups are removed; so a SIGKILL at
any moment leaves the previous complete backup or the new one, never a
half-written file that looks like a backup. Nothing is unpickled: weights are
HDF5 arrays, the state is JSON.
"""

import json
import os
import shutil
import sys
import tempfile
import warnings

import keras
import numpy as np

from keras_dml import hyperparameters

__all__ = ["BackupError", "TrainingBackup", "complete_backups", "read_state"]

FORMAT = 1
_PREFIX = "epoch-"


class BackupError(ValueError):
    """A backup that cannot be used: corrupt, or made by another model or stream."""


def _fingerprint(model):
    """Shapes and dtypes of the model's weights, in order (the names of
    auto-named layers vary from process to process; `load_weights` matches by
    structure)."""
    return [[list(v.shape), str(v.dtype)] for v in model.weights]


def _seed_states(model):
    """The model's variables outside its weights: the states of its random seed
    generators (its layers', its loss's and miner's), which `save_weights` leaves out."""
    weights = {id(v) for v in model.weights}
    return [v for v in model.variables if id(v) not in weights]


def _stream_position(stream):
    """The position a keras_dml stream carries, or None (tf.data's module only for
    tf.data)."""
    from keras_dml.data.arrays import ClassBalancedPyDataset

    if isinstance(stream, ClassBalancedPyDataset):
        return stream.position
    from keras_dml.data.pipeline import stream_position

    return stream_position(stream)


def _lost_position(stream):
    """The one line saying that `stream`, made from a keras_dml stream, lost its
    position, or None (a stream exists only once `keras_dml.data.stream` is imported)."""
    streams = sys.modules.get("keras_dml.data.stream")
    return None if streams is None else streams.lost_sentence(stream, "position")


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_file(path, text):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def complete_backups(backup_dir):
    """The complete backups in `backup_dir`, oldest first, as `(epoch, folder)`."""
    if not os.path.isdir(backup_dir):
        return []
    found = []
    for name in os.listdir(backup_dir):
        if name.startswith(_PREFIX) and name[len(_PREFIX):].isdigit():
            found.append((int(name[len(_PREFIX):]), os.path.join(backup_dir, name)))
    return sorted(found)


def read_state(folder):
    """The `state.json` of one backup folder; `BackupError` when it is unreadable."""
    path = os.path.join(folder, "state.json")
    try:
        with open(path, encoding="utf-8") as handle:
            state = json.load(handle)
    except (OSError, ValueError) as error:
        raise BackupError(f"backup {folder!r} is corrupt: cannot read state.json ({error}). "
                          "Delete the folder to start over.") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else None
        raise BackupError(f"backup {folder!r} is corrupt or from another version: "
                          f"state.json has format {found!r}, "
                          f"expected {FORMAT}.")
    return state


class TrainingBackup(keras.callbacks.Callback):
    """Back up training at every epoch end; resume exactly from the last backup.

    A drop-in for `keras.callbacks.BackupAndRestore` with three guarantees:

    - Exact: with `stream=` the dataset from `keras_dml.data.class_balanced_batches`
      or a `keras_dml.data.ClassBalancedPyDataset` (with a `seed`), the stream
      restarts at the batch after the last one trained, so on CPU a killed and
      resumed run reproduces the uninterrupted loss trajectory exactly, on every
      Keras backend (the sampler is step-indexed; the model, the optimizer, the
      loss-owned weights and the seed generators' states come from the backup).
    - Crash-safe: a backup is renamed into place only once complete; SIGKILL
      at any moment leaves a usable backup (see the module docstring).
    - Loud: a backup that is corrupt, from a model with other weights, or from
      a stream with another seed or batch size is a `BackupError` (a
      ValueError) at `on_train_begin`, never a silent restart from scratch.

    Use one `backup_dir` per run. `fit(..., epochs=E)` on a model whose backup
    holds epoch `e` trains epochs `e..E-1` only.

    Args:
        backup_dir: Folder of the backups (created).
        stream: The training dataset returned by `class_balanced_batches` (or
            `design_batches`), or a `ClassBalancedPyDataset`. Defaults to `None`:
            the data restarts from its beginning on resume (a warning says so).
        keep: Complete backups kept (the newest ones). Defaults to 1.
        delete_on_end: Remove `backup_dir` when `fit` ends normally. Defaults
            to False (a finished run can be continued with more epochs).

    Attributes:
        history: Dict of per-epoch logs of every epoch trained so far, the
            restored ones included (what `History` would hold without the crash).
        resumed_from: The epoch restored at `on_train_begin`, or `None`.
    """

    def __init__(self, backup_dir, stream=None, keep=1, delete_on_end=False):
        super().__init__()
        if not backup_dir:
            raise ValueError("TrainingBackup needs a backup_dir.")
        keep = hyperparameters.integer_at_least("keep", keep, 1, strict=True)
        self.backup_dir = str(backup_dir)
        self.position = None if stream is None else _stream_position(stream)
        if stream is not None and self.position is None:
            raise ValueError(_lost_position(stream) or (
                "TrainingBackup(stream=...) takes the stream returned by "
                "keras_dml.data.class_balanced_batches (also after .prefetch, .map or "
                ".repeat) or a keras_dml.data.ClassBalancedPyDataset, whose batches are "
                "step-indexed."))
        if self.position is not None and not self.position.replayable:
            warnings.warn("TrainingBackup: this stream is steered while training (hard "
                          "negative class mining) and cannot be replayed; a resume "
                          "continues with fresh batches.", stacklevel=2)
        self.keep = keep
        self.delete_on_end = delete_on_end
        self.history = {}
        self.resumed_from = None
        self._epoch_start = 0
        self._batches = 0

    # -- restore --------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        self._clean_partial()
        backups = complete_backups(self.backup_dir)
        self._epoch_start = self.position.start if self.position is not None else 0
        if not backups:
            return
        epoch, folder = backups[-1]
        state = read_state(folder)
        self._check(state, folder)
        if self.model.optimizer is not None and not self.model.optimizer.built:
            self.model.optimizer.build(self.model.trainable_variables)
        weights = os.path.join(folder, "model.weights.h5")
        try:
            self.model.load_weights(weights)
        except Exception as error:  # h5py raises OSError, KeyError, ValueError...
            raise BackupError(
                f"backup {weights!r} is corrupt and cannot be loaded "
                f"({type(error).__name__}: {error}). Delete {folder!r} to start over."
            ) from None
        self._restore_seeds(state, folder)
        self.model._initial_epoch = int(state["epoch"])
        self.history = {k: list(v) for k, v in state.get("history", {}).items()}
        if self.position is not None:
            self.position.start = int(state["position"])
            self._epoch_start = self.position.start
        elif state.get("stream") is not None:
            warnings.warn(
                "TrainingBackup: resuming without stream=: the data restarts from its "
                "first batch, so the resumed run sees other batches than an "
                "uninterrupted one. Pass stream=<class_balanced_batches dataset>.",
                stacklevel=2)
        self.resumed_from = int(state["epoch"])

    def _check(self, state, folder):
        saved = state.get("fingerprint")
        current = _fingerprint(self.model)
        if saved != current:
            saved = saved or []
            differ = [f"{v.path} {tuple(v.shape)} (backup: "
                      f"{tuple(saved[i][0]) if i < len(saved) else 'none'})"
                      for i, v in enumerate(self.model.weights)
                      if i >= len(saved) or saved[i] != current[i]]
            raise BackupError(
                f"backup {folder!r} was made by another model: it holds {len(saved)} "
                f"weights, this model has {len(current)}; first differences: "
                f"{differ[:3]}. Use another backup_dir or delete this one.")
        stream = state.get("stream")
        if stream is not None and self.position is not None:
            now = {"seed": self.position.seed, "batch_size": self.position.batch_size}
            if stream != now:
                raise BackupError(
                    f"backup {folder!r} was made with the stream {stream}, but the stream "
                    f"passed now has {now}: a resume would see other batches.")

    def _restore_seeds(self, state, folder):
        if "seeds" not in state:  # a backup written before seed states were saved
            return
        saved, variables = state["seeds"], _seed_states(self.model)
        if len(saved) != len(variables):
            raise BackupError(
                f"backup {folder!r} holds {len(saved)} random seed states, this model has "
                f"{len(variables)}: it was made by another model. Use another backup_dir "
                "or delete this one.")
        for variable, value in zip(variables, saved):
            variable.assign(np.asarray(value, dtype=variable.dtype))

    def _clean_partial(self):
        if not os.path.isdir(self.backup_dir):
            return
        for name in os.listdir(self.backup_dir):
            if name.startswith(".partial-"):
                shutil.rmtree(os.path.join(self.backup_dir, name), ignore_errors=True)

    # -- save -----------------------------------------------------------------------
    def on_train_batch_end(self, batch, logs=None):
        self._batches = batch + 1

    def on_epoch_begin(self, epoch, logs=None):
        self._batches = 0

    def on_epoch_end(self, epoch, logs=None):
        for key, value in (logs or {}).items():
            self.history.setdefault(key, []).append(float(np.asarray(value)))
        self._epoch_start += self._batches
        self.save(epoch + 1)

    def save(self, epoch):
        """Write the backup of the state after `epoch` epochs (atomically)."""
        os.makedirs(self.backup_dir, exist_ok=True)
        partial = tempfile.mkdtemp(prefix=".partial-", dir=self.backup_dir)
        self.model.save_weights(os.path.join(partial, "model.weights.h5"))
        with open(os.path.join(partial, "model.weights.h5"), "rb+") as handle:
            os.fsync(handle.fileno())
        stream = None if self.position is None else {
            "seed": self.position.seed, "batch_size": self.position.batch_size}
        state = {"format": FORMAT, "epoch": int(epoch), "position": int(self._epoch_start),
                 "stream": stream, "history": self.history,
                 "seeds": [keras.ops.convert_to_numpy(v).tolist()
                           for v in _seed_states(self.model)],
                 "fingerprint": _fingerprint(self.model)}
        _write_file(os.path.join(partial, "state.json"), json.dumps(state))
        _fsync_dir(partial)
        final = os.path.join(self.backup_dir, f"{_PREFIX}{epoch}")
        if os.path.exists(final):  # an epoch trained again after a restore
            shutil.rmtree(final)
        os.replace(partial, final)
        _fsync_dir(self.backup_dir)
        for _, old in complete_backups(self.backup_dir)[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def on_train_end(self, logs=None):
        if self.delete_on_end and not self.model.stop_training:
            shutil.rmtree(self.backup_dir, ignore_errors=True)
