"""Subprocess side of the fault-injection tests: a tiny run that can be SIGKILLed.

    python fault_worker.py train BACKUP_DIR OUT.json EPOCHS [KILL_EPOCH KILL_BATCH]
        Trains a small DMLModel (with dropout) with ProxyAnchor on C x k batches,
        backing up every epoch with TrainingBackup; writes the full per-epoch loss
        history and the final weights to OUT.json. With KILL_EPOCH / KILL_BATCH it
        SIGKILLs itself after that batch.
    python fault_worker.py train-arrays ...
        The same with the NumPy stream (`ClassBalancedPyDataset`, any backend) and a
        random augmentation seeded by step.
    python fault_worker.py save-forever BACKUP_DIR
        Saves a backup in a loop (prints "ready" first) until it is killed.
    python fault_worker.py cli-killed-before-backup EPOCH ARG...
        Runs `keras-dml ARG...` and SIGKILLs itself when the backup of EPOCH epochs is
        about to be written (after that epoch is logged to history.csv): the kill lands
        at the same point on a fast or a slow machine.
"""

import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_dml import data, losses  # noqa: E402
from keras_dml.backend.augmentation import training_call  # noqa: E402
from keras_dml.callbacks.backup import TrainingBackup  # noqa: E402
from keras_dml.models import DMLModel  # noqa: E402

STEPS = 4


def build(stream="tfdata"):
    """(model, batches): `stream` "tfdata" (`class_balanced_batches`) or "arrays"
    (`ClassBalancedPyDataset` with a noise augmentation seeded by step)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((12,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    hidden = keras.layers.Dropout(0.25, seed=5)(hidden)
    model = DMLModel(inputs, keras.layers.Dense(8)(hidden))
    model.compile(keras.optimizers.Adam(1e-2), losses.ProxyAnchor(num_classes=10))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 12)).astype("float32")
    y = np.repeat(np.arange(10), 20)
    if stream == "arrays":
        noise = training_call(keras.layers.GaussianNoise(0.3, seed=2))
        return model, data.ClassBalancedPyDataset(
            x, y, 4, 3, seed=1, map_fn=lambda x, y, step: (noise(x, step), y))
    return model, data.class_balanced_batches((x, y), 4, 3, seed=1)


class KillAt(keras.callbacks.Callback):
    def __init__(self, epoch, batch):
        super().__init__()
        self.at = (epoch, batch)
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if (self.epoch, batch) == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def train(backup_dir, out, epochs, kill=None, stream="tfdata"):
    model, batches = build(stream)
    backup = TrainingBackup(backup_dir, stream=batches)
    callbacks = [backup] + ([KillAt(*kill)] if kill else [])
    model.fit(batches, epochs=epochs, steps_per_epoch=STEPS, callbacks=callbacks, verbose=0)
    with open(out, "w") as f:
        json.dump({"loss": backup.history["loss"], "resumed_from": backup.resumed_from,
                   "weights": [w.tolist() for w in model.get_weights()]}, f)


def save_forever(backup_dir):
    model, batches = build()
    backup = TrainingBackup(backup_dir, stream=batches)
    model.fit(batches, epochs=1, steps_per_epoch=1, callbacks=[backup], verbose=0)
    print("ready", flush=True)
    epoch = 1
    while True:
        epoch += 1
        backup.save(epoch)


def cli_killed_before_backup(epoch, args):
    from keras_dml import cli

    save = TrainingBackup.save

    def save_or_die(self, epochs_done):
        if epochs_done == epoch:
            os.kill(os.getpid(), signal.SIGKILL)
        save(self, epochs_done)

    TrainingBackup.save = save_or_die
    sys.exit(cli.main(args))


if __name__ == "__main__":
    command, backup_dir = sys.argv[1], sys.argv[2]
    if command == "cli-killed-before-backup":
        cli_killed_before_backup(int(sys.argv[2]), sys.argv[3:])
    elif command in ("train", "train-arrays"):
        kill = tuple(int(v) for v in sys.argv[5:7]) or None
        train(backup_dir, sys.argv[3], int(sys.argv[4]), kill,
              "arrays" if command == "train-arrays" else "tfdata")
    else:
        save_forever(backup_dir)
