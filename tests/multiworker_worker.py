"""One worker of the localhost multi-worker tests (tests/test_distribute.py).

Run with TF_CONFIG set: trains a small DMLModel under MultiWorkerMirroredStrategy on
the per-worker class-balanced pipeline and writes its final weights to --out.
Without TF_CONFIG, `train()` is the single-process reference run.
"""

import argparse
import json
import os
import signal
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_dml import data, losses  # noqa: E402
from keras_dml.training.distribute import BackupAndRestore, task_name  # noqa: E402
from keras_dml.layers import EmbeddingHead  # noqa: E402
from keras_dml.models import DMLModel  # noqa: E402

CLASSES, PER_CLASS, C, K, SEED = 16, 6, 8, 3, 7


def source():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(CLASSES * PER_CLASS, 10)).astype("float32")
    return x, np.repeat(np.arange(CLASSES), PER_CLASS)


def make_loss(name):
    if name == "proxy_anchor":
        return losses.ProxyAnchor(num_classes=CLASSES)
    return losses.MultiSimilarity(miner=None)


def build(loss):
    keras.utils.set_random_seed(3)
    inputs = keras.Input((10,))
    hidden = keras.layers.Dense(16, activation="tanh")(inputs)
    model = DMLModel(inputs, EmbeddingHead(8)(hidden))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=make_loss(loss))
    return model


class KillAt(keras.callbacks.Callback):
    """SIGKILL this process after `step` training steps (a crash, no clean-up)."""

    def __init__(self, step):
        super().__init__()
        self.step, self.seen = step, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def train(loss, epochs, steps, strategy=None, backup=None, kill_at=None, checkpoint=None):
    """(model, history) of a run; single-process when `strategy` is None.

    `checkpoint`: a folder where `keras.callbacks.ModelCheckpoint` saves the model
    after every epoch, to `<task>-<epoch>.keras` (each worker its own file)."""
    if strategy is None:
        model = build(loss)
        stream = data.class_balanced_batches(source(), C, K, seed=SEED)
        callbacks = []
    else:
        with strategy.scope():
            model = build(loss)
        stream = data.distributed_class_balanced_batches(strategy, source(), C, K, seed=SEED)
        callbacks = [] if backup is None else [BackupAndRestore(backup, stream=stream)]
    if kill_at:
        callbacks.append(KillAt(kill_at))
    if checkpoint:
        callbacks.append(keras.callbacks.ModelCheckpoint(
            os.path.join(checkpoint, task_name() + "-{epoch}.keras")))
    history = model.fit(stream, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks,
                        verbose=0)
    return model, history


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--loss", default="multi_similarity")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--backup", default=None)
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--checkpoint", default=None)
    args = parser.parse_args(argv)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    model, history = train(args.loss, args.epochs, args.steps, strategy, args.backup,
                           args.kill_at, args.checkpoint)
    np.savez(args.out, *model.get_weights())
    with open(args.out + ".json", "w") as f:
        json.dump({"epochs_trained": len(history.history["loss"]),
                   "loss": history.history["loss"],
                   "replicas": strategy.num_replicas_in_sync}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
