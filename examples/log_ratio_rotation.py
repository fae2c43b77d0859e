"""Log-ratio loss on a continuous target: the rotation angle of real Omniglot images.

Introduction
------------
The log-ratio loss (Kim et al., "Deep Metric Learning Beyond Binary Supervision",
CVPR 2019) learns an embedding whose distances are proportional to distances
between continuous labels, where binary losses only see "same" or "not". The
paper's continuous targets (human poses, room layouts, captions) cannot be had on
this machine, so this script builds one transparently from real images: every
Omniglot character image (28 x 28, ink = 1, cropped to the inscribed disc so that
rotating leaves no corner artefacts) is rotated by a random angle theta, and its
label is the pose-like vector y = (cos theta, sin theta). The label distance is the
paper's squared Euclidean D_y = |y_i - y_j|^2 = 2 - 2 cos(theta_i - theta_j).

Two identical small CNNs are trained with the same seed, data and steps:
- `LogRatio()` on the (cos, sin) labels, with dense triplets (every triplet of each
  batch of 128);
- the slides' baseline: `Triplet(mining="all")` (dense triplets, cosine, margin 0.1)
  on binarised labels, the angle quantised into `--bins` sectors (the "binary
  thresholding" of the slides).
Both are evaluated on held-out classes (Omniglot's 659 evaluation characters, new
alphabets): the Spearman rank correlation between the embedding distances of all
pairs of `--eval` rotated held-out images and their label distances D_y. Raw pixels
give the untrained reference.

    python examples/log_ratio_rotation.py --epochs 6

The measured table is in docs/log_ratio.md.
"""

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf
from scipy import ndimage
from scipy.spatial.distance import pdist
from scipy.stats import spearmanr

import keras_dml.losses
from keras_dml.models import DMLModel

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                    "datasets", "omniglot")
SIZE = 28


def load_images(name, count, rng):
    """`count` random images of an Omniglot split, (count, 28, 28), ink = 1, on a disc."""
    with np.load(os.path.join(DATA, name)) as data:
        images = data["images"].reshape(-1, 105, 105)
    chosen = images[rng.choice(len(images), size=count, replace=False)]
    ink = 1.0 - chosen[..., None].astype("float32")
    small = tf.image.resize(ink, (SIZE, SIZE), antialias=True).numpy()[..., 0]
    centre = (SIZE - 1) / 2
    yy, xx = np.mgrid[:SIZE, :SIZE]
    disc = ((yy - centre) ** 2 + (xx - centre) ** 2) <= (SIZE / 2) ** 2
    return small * disc


def rotate(images, rng):
    """Rotate each image by a random angle; return images (n, 28, 28, 1) and angles."""
    angles = rng.uniform(0.0, 2 * np.pi, size=len(images))
    rotated = np.stack([
        ndimage.rotate(image, np.degrees(angle), reshape=False, order=1, cval=0.0)
        for image, angle in zip(images, angles)
    ])
    return rotated[..., None].astype("float32"), angles


def pose(angles):
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype("float32")


def build_model(dim, seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((SIZE, SIZE, 1))
    x = inputs
    for filters in (32, 64, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
    return DMLModel(inputs, keras.layers.Dense(dim)(x))


def spearman(distances, label_distances):
    """Spearman rho over all pairs i < j (condensed `pdist` vectors)."""
    return float(spearmanr(distances, label_distances).statistic)


def squared_distances(x):
    return pdist(x.reshape(len(x), -1).astype("float64"), "sqeuclidean")


def cosine_distances(x):
    return pdist(x.astype("float64"), "cosine")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=12000, help="training images")
    parser.add_argument("--eval", type=int, default=1500, help="held-out test images")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--dim", type=int, default=16, help="embedding size")
    parser.add_argument("--bins", type=int, default=8, help="angle sectors of the baseline")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.time()

    rng = np.random.default_rng(args.seed)
    x_train, train_angles = rotate(load_images("images_background.npz", args.train, rng), rng)
    x_test, test_angles = rotate(load_images("images_evaluation.npz", args.eval, rng), rng)
    y_train = pose(train_angles)
    y_test = pose(test_angles)
    test_label_distances = squared_distances(y_test)
    sectors = np.floor(train_angles / (2 * np.pi / args.bins)).astype("int32") % args.bins
    print(f"data: {len(x_train)} rotated background images (train), {len(x_test)} rotated "
          f"evaluation images (held-out classes), {time.time() - start:.0f} s", flush=True)

    rows = [("raw pixels (no training)", "squared Euclidean",
             spearman(squared_distances(x_test), test_label_distances), 0.0)]
    runs = [
        ("LogRatio, (cos, sin) labels", keras_dml.losses.LogRatio(), y_train,
         squared_distances, "squared Euclidean"),
        (f"Triplet (dense, margin 0.1), {args.bins} angle bins",
         keras_dml.losses.Triplet(mining="all"), sectors, cosine_distances, "cosine"),
    ]
    for name, loss, labels, distance, distance_name in runs:
        began = time.time()
        model = build_model(args.dim, args.seed)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        model.fit(x_train, labels, batch_size=args.batch, epochs=args.epochs, shuffle=True,
                  verbose=2)
        embeddings = model.embedder().predict(x_test, batch_size=512, verbose=0)
        rho = spearman(distance(embeddings), test_label_distances)
        rows.append((name, distance_name, rho, time.time() - began))
        print(f"{name}: Spearman {rho:.3f} ({time.time() - began:.0f} s)", flush=True)

    print(f"\nSpearman rank correlation between embedding distances and label distances "
          f"D_y = 2 - 2 cos(theta_i - theta_j), all {len(x_test) * (len(x_test) - 1) // 2} "
          f"pairs of {len(x_test)} held-out images (Omniglot evaluation alphabets); "
          f"embedding size {args.dim}, {args.epochs} epochs of {len(x_train)} images, "
          f"batch {args.batch}, seed {args.seed}.\n")
    print("| model | embedding distance | Spearman rho | train time (s) |")
    print("|---|---|---|---|")
    for name, distance_name, rho, seconds in rows:
        print(f"| {name} | {distance_name} | {rho:.3f} | {seconds:.0f} |")
    print(f"\ntotal wall time {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
