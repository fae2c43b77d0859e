"""CUB-200-2011: first half of the classes train, second half test."""

import os

from keras_dml.datasets.base import DMLSplits, check_image_files, split_by_class_halves
from keras_dml.datasets.layout import MARKERS, find_root, integer_fields, read_rows
from keras_dml.datasets.tfds_source import export_tfds_images, from_tfds, use_local

__all__ = ["load_cub200"]

HOW_TO_GET = (
    "Download CUB_200_2011.tgz from https://www.vision.caltech.edu/datasets/cub_200_2011/ "
    "and pass data_dir= the extracted CUB_200_2011 folder (images.txt, "
    "image_class_labels.txt, classes.txt, images/) or its parent; or call "
    "load('cub200') without data_dir where tfds can download 'caltech_birds2011'."
)


def load_cub200(data_dir=None, source="auto"):
    """Loads CUB-200-2011 with the DML split (classes sorted by id, halves).

    The local layout needs `images.txt`, `image_class_labels.txt`,
    `classes.txt` and `images/`; `bounding_boxes.txt` and
    `train_test_split.txt` are not used (the official split is not the DML one).

    Args:
        data_dir: The `CUB_200_2011` folder or its parent. Defaults to `None`.
        source: `"auto"`, `"local"` or `"tfds"`. Defaults to `"auto"`.

    Returns:
        A `DMLSplits` of file-based `LabeledImages`.
    """
    if use_local(data_dir, source):
        return _load_local(data_dir)
    return from_tfds("cub200", HOW_TO_GET, lambda: _load_tfds(data_dir))


def _load_local(data_dir):
    root = find_root(data_dir, *MARKERS["cub200"], "cub200", HOW_TO_GET)
    images = _by_id(root, "images.txt", ("image_id", "path"))
    labels = _by_id(root, "image_class_labels.txt", ("image_id", "class_id"), integer=1)
    names = {cid: row[1] for cid, (_, row) in
             _by_id(root, "classes.txt", ("class_id", "name")).items()}
    missing = [(line, i) for i, (line, _) in images.items() if i not in labels]
    if missing:
        raise ValueError(
            f"cub200: {len(missing)} image ids of images.txt have no line in "
            "image_class_labels.txt (first: " + ", ".join(
                f"id {i} at images.txt line {line}" for line, i in missing[:3]) + ").")
    ids = sorted(images)
    paths = [os.path.join(root, "images", images[i][1][1]) for i in ids]
    raw = [int(labels[i][1][1]) for i in ids]
    lines = [f"images.txt line {images[i][0]}" for i in ids]
    paths, raw, skipped = check_image_files(paths, raw, "cub200", lines)
    train, test = split_by_class_halves(raw, paths=paths, names=names, dataset="cub200")
    train.skipped = test.skipped = skipped
    return DMLSplits(name="cub200", train=train, test=test)


def _by_id(root, filename, fields, integer=None):
    """`{id: (line, row)}` of a CUB list file; its ids must be unique integers."""
    positions = (0,) if integer is None else (0, integer)
    rows = read_rows(os.path.join(root, filename), fields,
                     check=integer_fields(*positions, names=fields))
    found = {}
    for line, row in rows:
        key = int(row[0])
        if key in found:
            raise ValueError(f"{os.path.join(root, filename)}, line {line}: {fields[0]} "
                             f"{key} already given at line {found[key][0]}.")
        found[key] = (line, row)
    return found


def _load_tfds(data_dir):
    exported = export_tfds_images("caltech_birds2011", "label", ("train", "test"), data_dir)
    paths = exported["train"][0] + exported["test"][0]
    raw = list(exported["train"][1] + 1) + list(exported["test"][1] + 1)
    train, test = split_by_class_halves(raw, paths=paths, dataset="cub200")
    return DMLSplits(name="cub200", train=train, test=test)
