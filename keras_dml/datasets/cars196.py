"""Cars196 (Stanford Cars): classes 1-98 train, 99-196 test."""

import os

import numpy as np

from keras_dml.datasets.base import DMLSplits, check_image_files, split_by_class_halves
from keras_dml.datasets.layout import MARKERS, find_root
from keras_dml.datasets.tfds_source import export_tfds_images, from_tfds, use_local

__all__ = ["load_cars196"]

HOW_TO_GET = (
    "Download car_ims.tgz and cars_annos.mat from "
    "https://ai.stanford.edu/~jkrause/cars/car_dataset.html, extract car_ims/ next "
    "to cars_annos.mat and pass data_dir= that folder; or call load('cars196') "
    "without data_dir where tfds can download 'cars196'."
)


def load_cars196(data_dir=None, source="auto"):
    """Loads Cars196 with the DML split (first 98 classes train, last 98 test).

    The local layout is the all-in-one release: `cars_annos.mat` (struct
    `annotations` with `relative_im_path`, `class`, ... and `class_names`)
    and the `car_ims/` folder, both in `data_dir`. The `test` flag of the
    annotations (the classification split) is not used.

    Args:
        data_dir: Folder holding `cars_annos.mat`. Defaults to `None`.
        source: `"auto"`, `"local"` or `"tfds"`. Defaults to `"auto"`.

    Returns:
        A `DMLSplits` of file-based `LabeledImages`.
    """
    if use_local(data_dir, source):
        return _load_local(data_dir)
    return from_tfds("cars196", HOW_TO_GET, lambda: _load_tfds(data_dir))


def read_cars_annos(path):
    """`(relative paths, class ids, class names by id)` from `cars_annos.mat`."""
    from scipy.io import loadmat

    mat = loadmat(path, squeeze_me=True)
    if "annotations" not in mat:
        raise ValueError(f"cars196: {path!r} has no 'annotations' struct.")
    annotations = np.atleast_1d(mat["annotations"])
    rel_paths = [str(a["relative_im_path"]) for a in annotations]
    classes = [int(a["class"]) for a in annotations]
    names = {i + 1: str(n) for i, n in enumerate(np.atleast_1d(mat.get("class_names", [])))}
    return rel_paths, classes, names


def _load_local(data_dir):
    root = find_root(data_dir, *MARKERS["cars196"], "cars196", HOW_TO_GET)
    rel_paths, classes, names = read_cars_annos(os.path.join(root, "cars_annos.mat"))
    paths = [os.path.join(root, p) for p in rel_paths]
    paths, classes, skipped = check_image_files(paths, classes, "cars196")
    train, test = split_by_class_halves(classes, paths=paths, names=names, dataset="cars196")
    train.skipped = test.skipped = skipped
    return DMLSplits(name="cars196", train=train, test=test)


def _load_tfds(data_dir):
    exported = export_tfds_images("cars196", "label", ("train", "test"), data_dir)
    paths = exported["train"][0] + exported["test"][0]
    raw = np.concatenate([exported["train"][1], exported["test"][1]]) + 1
    train, test = split_by_class_halves(raw, paths=paths, dataset="cars196")
    return DMLSplits(name="cars196", train=train, test=test)
