"""Does training on digits 0-4 help retrieval of the unseen digits 5-9?

`keras-dml train --dataset digits` trains on scikit-learn's 8x8 digits 0-4 and
evaluates on 5-9 (class-disjoint, leave-one-out). This study trains several
set-ups and prints held-out Recall@1 and MAP@R after every epoch, next to the
untrained model and the raw pixels, to show where a gain can and cannot come from
on this split. Findings are in docs/digits_transfer.md.

    python examples/digits_transfer_study.py [--epochs 8] [--steps 25] [--only NAME ...]

About 2 minutes on 2 CPU cores.
"""

import argparse

import keras
import numpy as np
import tensorflow as tf

import keras_dml
from keras_dml import backbones, data, evaluation, losses
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel


def held_out_metrics(embeddings, labels):
    metrics = evaluation.retrieval_metrics(embeddings, labels, ks=(1,))
    return 100 * metrics["recall@1"], 100 * metrics["map@r"]


def flat_backbone(input_shape, hidden=None):
    """Flattened pixels, optionally through one ReLU layer (a linear or MLP embedder)."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Flatten()(inputs)
    if hidden:
        x = keras.layers.Dense(hidden, activation="relu")(x)
    return keras.Model(inputs, x)


def augmenter(seed):
    return keras.Sequential([
        keras.layers.RandomTranslation(0.125, 0.125, fill_mode="constant", seed=seed),
        keras.layers.RandomRotation(0.05, fill_mode="constant", seed=seed),
    ])


def class_batches(train, seed, augment=False):
    """The default job's batches: 5 classes x 16 samples, labels = digit."""
    batches = data.class_balanced_batches(train, 5, 16, seed=seed)
    if augment:
        jitter = augmenter(seed)
        batches = batches.map(lambda x, y: (jitter(x, training=True), y))
    return batches


def instance_batches(train, seed, images_per_batch=64):
    """Two augmented views of each of 64 images, labels = image id (no digit labels)."""
    images = tf.constant(train.images)
    first, second = augmenter(seed), augmenter(seed + 1)  # two independent jitters

    def views(ids):
        batch = tf.gather(images, ids)
        pair = tf.concat([first(batch, training=True), second(batch, training=True)], 0)
        return pair, tf.concat([ids, ids], 0)

    ids = tf.data.Dataset.range(len(train.images)).repeat().shuffle(len(train.images), seed)
    return ids.map(lambda i: tf.cast(i, tf.int32)).batch(images_per_batch).map(views)


SETUPS = {
    # name: (backbone builder, loss, batches)
    "convnet + MultiSimilarity (default job)":
        (backbones.convnet, losses.MultiSimilarity, class_batches),
    "convnet + Contrastive": (backbones.convnet, losses.Contrastive, class_batches),
    "convnet + MultiSimilarity + augmentation":
        (backbones.convnet, losses.MultiSimilarity,
         lambda train, seed: class_batches(train, seed, augment=True)),
    "linear + MultiSimilarity": (flat_backbone, losses.MultiSimilarity, class_batches),
    "MLP + MultiSimilarity":
        (lambda shape: flat_backbone(shape, 256), losses.MultiSimilarity, class_batches),
    "convnet + MultiSimilarity on image ids (no labels)":
        (backbones.convnet, losses.MultiSimilarity, instance_batches),
    # control, not class-disjoint: train on half the images of 5-9, test on the other half
    "control: convnet + MultiSimilarity, seen classes":
        (backbones.convnet, losses.MultiSimilarity, class_batches),
}
SEEN_CLASSES = "control: convnet + MultiSimilarity, seen classes"


def train_and_test_sets(name):
    """(train split, test images, test labels): 0-4 vs 5-9, or halves of 5-9 (control)."""
    splits = keras_dml.datasets.load("digits")
    if name != SEEN_CLASSES:
        return splits.train, splits.test.images, splits.test.labels
    test = splits.test
    order = np.arange(len(test.labels))
    return test.subset(order[1::2]), test.images[0::2], test.labels[0::2]


def study(name, epochs, steps, seed=0, dim=64, learning_rate=1e-3):
    make_backbone, make_loss, make_batches = SETUPS[name]
    train, test_x, test_y = train_and_test_sets(name)
    keras.utils.set_random_seed(seed)
    backbone = make_backbone(train.images.shape[1:])
    model = DMLModel(backbone.input, EmbeddingHead(dim)(backbone.output))
    model.compile(optimizer=keras.optimizers.Adam(learning_rate), loss=make_loss())
    batches = make_batches(train, seed)
    curve = [held_out_metrics(model.predict(test_x, verbose=0), test_y)]
    for _ in range(epochs):
        model.fit(batches, epochs=1, steps_per_epoch=steps, verbose=0)
        curve.append(held_out_metrics(model.predict(test_x, verbose=0), test_y))
    return curve


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=25)
    parser.add_argument("--only", nargs="+", choices=list(SETUPS), default=list(SETUPS))
    args = parser.parse_args()
    splits = keras_dml.datasets.load("digits")
    pixels = splits.test.images.reshape(len(splits.test.images), -1)
    r1, mapr = held_out_metrics(pixels, splits.test.labels)
    print(f"raw pixels (no model): R@1 {r1:.1f}  MAP@R {mapr:.1f}")
    print(f"{'set-up':52s} {'untrained':>13s} {'best epoch':>13s} {'last epoch':>13s}")
    for name in args.only:
        curve = study(name, args.epochs, args.steps)
        best = max(range(1, len(curve)), key=lambda e: curve[e][1])
        cells = [curve[0], curve[best], curve[-1]]
        print(f"{name:52s} " + " ".join(f"{a:5.1f} / {b:5.1f}" for a, b in cells)
              + f"   (best MAP@R at epoch {best})", flush=True)
    print("cells: held-out R@1 / MAP@R on digits 5-9 (%)")


if __name__ == "__main__":
    main()
