"""Log-ratio loss on a continuous target: the rotation angle of real images.

Introduction
------------
The log-ratio loss (Kim et al., "Deep Metric Learning Beyond Binary Supervision",
CVPR 2019) learns an embedding whose distances are proportional to distances
between continuous labels, where binary losses only see "same" or "not". The
paper's continuous targets (human poses, room layouts, captions) cannot be had on
this machine, so this script builds one transparently from real images: every
image (CUB-200 bird photos by default, or Omniglot characters), downscaled and
cropped to its inscribed disc so that rotating leaves no corner artefacts, is
rotated by a random angle theta, and its label is the pose-like vector
y = (cos theta, sin theta). The label distance is the paper's squared Euclidean
D_y = |y_i - y_j|^2 = 2 - 2 cos(theta_i - theta_j).

Two identical small CNNs are trained with the same seed, data and steps:
- `LogRatio()` on the (cos, sin) labels, with dense triplets (every triplet of each
  batch);
- the slides' baseline: `Triplet(mining="all")` (dense triplets, cosine, margin 0.1)
  on binarised labels, the angle quantised into `--bins` sectors (the "binary
  thresholding" of the slides).
Both are evaluated on held-out classes (CUB: species 51-100, the DML protocol's
test half; Omniglot: the 659 evaluation characters): the Spearman rank
correlation between the embedding distances of all pairs of rotated held-out
images and their label distances D_y. Raw pixels give the untrained reference.

    python examples/log_ratio_rotation.py                     # CUB, ~11 min here
    python examples/log_ratio_rotation.py --dataset omniglot

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

SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                      "datasets")


def on_disc(images):
    """Zero every pixel outside the inscribed disc of square images (n, s, s, ch)."""
    size = images.shape[1]
    centre = (size - 1) / 2
    yy, xx = np.mgrid[:size, :size]
    disc = ((yy - centre) ** 2 + (xx - centre) ** 2) <= (size / 2) ** 2
    return images * disc[None, :, :, None]


def load_cub(train, size):
    """CUB-200 subset photos of species 1-50 (train) or 51-100 (held out), in [0, 1]."""
    root = os.path.join(SHARED, "cub200_subset", "CUB_200_2011")
    with open(os.path.join(root, "images.txt")) as f:
        paths = dict(line.split() for line in f)
    with open(os.path.join(root, "image_class_labels.txt")) as f:
        classes = {k: int(v) for k, v in (line.split() for line in f)}
    chosen = [paths[i] for i in sorted(paths, key=int) if (classes[i] <= 50) == train]
    images = [
        tf.image.resize(tf.io.decode_jpeg(tf.io.read_file(os.path.join(root, "images", p)),
                                          channels=3), (size, size), antialias=True)
        for p in chosen
    ]
    return on_disc(np.stack(images).astype("float32") / 255.0)


def load_omniglot(train, size):
    """Omniglot background (train) or evaluation (held out) characters, ink = 1."""
    name = "images_background.npz" if train else "images_evaluation.npz"
    with np.load(os.path.join(SHARED, "omniglot", name)) as data:
        images = data["images"].reshape(-1, 105, 105, 1)
    ink = 1.0 - images.astype("float32")
    return on_disc(tf.image.resize(ink, (size, size), antialias=True).numpy())


def rotate(images, copies, rng):
    """`copies` rotations of each image by random angles: images and angles (radians)."""
    images = np.repeat(images, copies, axis=0)
    angles = rng.uniform(0.0, 2 * np.pi, size=len(images))
    rotated = np.stack([
        ndimage.rotate(image, np.degrees(angle), axes=(1, 0), reshape=False, order=1,
                       cval=0.0)
        for image, angle in zip(images, angles)
    ])
    return rotated.astype("float32"), angles


def pose(angles):
    return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype("float32")


def build_model(shape, dim, seed):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input(shape)
    x = inputs
    for filters in (32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
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
    parser.add_argument("--dataset", choices=("cub", "omniglot"), default="cub")
    parser.add_argument("--size", type=int, default=32, help="image side after resizing")
    parser.add_argument("--copies", type=int, default=4,
                        help="random rotations of each training image")
    parser.add_argument("--eval", type=int, default=800, help="held-out test images")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--dim", type=int, default=16, help="embedding size")
    parser.add_argument("--bins", type=int, default=8, help="angle sectors of the baseline")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    start = time.time()

    rng = np.random.default_rng(args.seed)
    load = load_cub if args.dataset == "cub" else load_omniglot
    train_images, test_images = load(True, args.size), load(False, args.size)
    test_images = test_images[rng.choice(len(test_images), size=min(args.eval,
                                                                    len(test_images)),
                                         replace=False)]
    x_train, train_angles = rotate(train_images, args.copies, rng)
    x_test, test_angles = rotate(test_images, 1, rng)
    y_train = pose(train_angles)
    y_test = pose(test_angles)
    test_label_distances = squared_distances(y_test)
    sectors = np.floor(train_angles / (2 * np.pi / args.bins)).astype("int32") % args.bins
    print(f"data: {args.dataset}, {len(x_train)} rotated training images ({len(train_images)} "
          f"x {args.copies}), {len(x_test)} rotated held-out-class images, "
          f"{time.time() - start:.0f} s", flush=True)

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
        model = build_model(x_train.shape[1:], args.dim, args.seed)
        model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
        model.fit(x_train, labels, batch_size=args.batch, epochs=args.epochs, shuffle=True,
                  verbose=2)
        embeddings = model.embedder().predict(x_test, batch_size=512, verbose=0)
        rho = spearman(distance(embeddings), test_label_distances)
        rows.append((name, distance_name, rho, time.time() - began))
        print(f"{name}: Spearman {rho:.3f} ({time.time() - began:.0f} s)", flush=True)

    print(f"\nSpearman rank correlation between embedding distances and label distances "
          f"D_y = 2 - 2 cos(theta_i - theta_j), all {len(x_test) * (len(x_test) - 1) // 2} "
          f"pairs of {len(x_test)} held-out-class {args.dataset} images; {args.size}x"
          f"{args.size} inputs, embedding size {args.dim}, {args.epochs} epochs of "
          f"{len(x_train)} images, batch {args.batch}, seed {args.seed}.\n")
    print("| model | embedding distance | Spearman rho | train time (s) |")
    print("|---|---|---|---|")
    for name, distance_name, rho, seconds in rows:
        print(f"| {name} | {distance_name} | {rho:.3f} | {seconds:.0f} |")
    print(f"\ntotal wall time {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
