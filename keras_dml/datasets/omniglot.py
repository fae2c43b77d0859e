"""Omniglot: background characters train, evaluation characters test.

Without `data_dir` the copy shipped inside the package is used: all 1,623
characters, 28 x 28 uint8, ink = 255 on a dark background (built by
`tools/build_omniglot.py`; Lake, Salakhutdinov and Tenenbaum, MIT licence).
"""

import os

import numpy as np

from keras_dml.datasets.base import DMLSplits, labeled_from_raw
from keras_dml.datasets.layout import MARKERS, find_root
from keras_dml.datasets.tfds_source import from_tfds, use_local

__all__ = ["BUNDLED", "load_omniglot"]

HOW_TO_GET = (
    "Put images_background.npz and images_evaluation.npz (arrays 'images', bool "
    "(characters, 20, 105, 105) with True = white background, and 'labels' "
    "(characters, 20)), built from the official PNGs of "
    "https://github.com/brendenlake/omniglot, in data_dir; or call "
    "load('omniglot') without data_dir for the bundled 28 x 28 copy."
)

NUM_BACKGROUND = 964
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "omniglot_28x28.npz")


def load_omniglot(data_dir=None, source="auto"):
    """Loads Omniglot: 964 background characters train, 659 evaluation test.

    Without `data_dir` (and without `$KERAS_DML_DATA_DIR`), `source="auto"`
    returns the bundled copy: uint8 `(N, 28, 28, 1)`, ink = 255 on a dark
    background (area-resized from the official 105 x 105 drawings). With
    `data_dir`, the official drawings are read: uint8 `(N, 105, 105, 1)`,
    255 = white background and 0 = ink, pixel for pixel as the PNGs.
    Either way 20 drawings per character (19,280 train, 13,180 test images),
    and class ids are global character ids: evaluation characters follow the
    964 background ones.

    Args:
        data_dir: Folder holding the two npz files (or `omniglot/` below
            it). Defaults to `None`: the bundled copy.
        source: `"auto"`, `"local"` or `"tfds"` (tfds' 105 x 105 RGB
            drawings). Defaults to `"auto"`.

    Returns:
        A `DMLSplits` of in-memory `LabeledImages`.
    """
    if use_local(data_dir, source):
        return _load_local(data_dir)
    if source == "auto":
        return load_bundled()
    return from_tfds("omniglot", HOW_TO_GET, lambda: _load_tfds(data_dir))


def load_bundled(path=BUNDLED):
    """The package's Omniglot copy: 28 x 28 uint8, ink = 255, NumPy only."""
    with np.load(path, allow_pickle=False) as data:
        parts = {part: data[part] for part in ("background", "evaluation")}
    return DMLSplits(
        name="omniglot",
        train=_labeled(parts["background"], None, 0, "background"),
        test=_labeled(parts["evaluation"], None, NUM_BACKGROUND, "evaluation"),
    )


def _labeled(images, labels, offset, what):
    """uint8 (characters, drawings, H, W) -> LabeledImages with global character ids.

    `labels` (characters, drawings) are the character ids; `None`: the row index.
    """
    if labels is None:
        labels = np.broadcast_to(np.arange(images.shape[0])[:, None], images.shape[:2])
    raw = labels.reshape(-1).astype(np.int64) + offset
    names = {int(c): f"{what}/{int(c) - offset:04d}" for c in np.unique(raw)}
    return labeled_from_raw(raw, images=images.reshape(-1, *images.shape[2:], 1),
                            names=names, what=f"omniglot {what}")


def _read_npz(path, offset, what):
    with np.load(path, allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    if images.ndim != 4 or images.shape[:2] != labels.shape:
        raise ValueError(
            f"omniglot: {path!r} must hold images (C, S, H, W) and labels (C, S); got "
            f"{images.shape} and {labels.shape}.")
    return _labeled(images.astype(np.uint8) * np.uint8(255), labels, offset, what)


def _load_local(data_dir):
    root = find_root(data_dir, *MARKERS["omniglot"], "omniglot", HOW_TO_GET)
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
