"""Omniglot: background characters train, evaluation characters test."""

import os

import numpy as np

from keras_dml.datasets.base import DMLSplits, labeled_from_raw
from keras_dml.datasets.layout import find_root
from keras_dml.datasets.tfds_source import from_tfds, use_local

HOW_TO_GET = (
    "Put images_background.npz and images_evaluation.npz (arrays 'images', bool "
    "(characters, 20, 105, 105) with True = white background, and 'labels' "
    "(characters, 20)), built from the official PNGs of "
    "https://github.com/brendenlake/omniglot, in data_dir; or call "
    "load('omniglot') without data_dir where tfds can download 'omniglot'."
)

NUM_BACKGROUND = 964


def load_omniglot(data_dir=None, source="auto"):
    """Loads Omniglot: 964 background characters train, 659 evaluation test.

    Images are in memory, uint8 `(N, 105, 105, 1)`, 255 = white background and
    0 = ink, pixel for pixel as the official PNGs. Class ids are global
    character ids: evaluation characters follow the 964 background ones.

    Args:
        data_dir: Folder holding the two npz files (or `omniglot/` below
            it). Defaults to `None`.
        source: `"auto"`, `"local"` or `"tfds"`. Defaults to `"auto"`.

    Returns:
        A `DMLSplits` of in-memory `LabeledImages`.
    """
    if use_local(data_dir, source):
        return _load_local(data_dir)
    return from_tfds("omniglot", HOW_TO_GET, lambda: _load_tfds(data_dir))


def _read_npz(path, offset, what):
    with np.load(path, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    if images.ndim != 4 or images.shape[:2] != labels.shape:
        raise ValueError(
            f"omniglot: {path!r} must hold images (C, S, H, W) and labels (C, S); got "
            f"{images.shape} and {labels.shape}.")
    images = images.reshape(-1, *images.shape[2:], 1).astype(np.uint8) * np.uint8(255)
    raw = labels.reshape(-1).astype(np.int64) + offset
    names = {int(c): f"{what}/{int(c) - offset:04d}" for c in np.unique(raw)}
    return labeled_from_raw(raw, images=images, names=names, what=f"omniglot {what}")


def _load_local(data_dir):
    root = find_root(data_dir, "images_background.npz", ["omniglot"], "omniglot",
                     HOW_TO_GET)
    return DMLSplits(
        name="omniglot",
        train=_read_npz(os.path.join(root, "images_background.npz"), 0, "background"),
        test=_read_npz(os.path.join(root, "images_evaluation.npz"), NUM_BACKGROUND,
                       "evaluation"),
    )


def _load_tfds(data_dir):
    import tensorflow_datasets as tfds

    splits = {}
    for split, what in (("train", "background"), ("test", "evaluation")):
        images, labels = [], []
        for example in tfds.load("omniglot", split=split, data_dir=data_dir).as_numpy_iterator():
            images.append(example["image"][..., :1])
            labels.append(int(example["label"]))
        names = {c: f"{what}/{c:04d}" for c in set(labels)}
        splits[split] = labeled_from_raw(np.asarray(labels), images=np.stack(images),
                                         names=names, what=f"omniglot {what}")
    return DMLSplits(name="omniglot", train=splits["train"], test=splits["test"])
