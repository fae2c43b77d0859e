"""Stanford Online Products: the official Ebay_train / Ebay_test lists."""

import os

from keras_dml.datasets.base import DMLSplits, check_image_files, labeled_from_raw
from keras_dml.datasets.layout import MARKERS, find_root, integer_fields, read_rows
from keras_dml.datasets.tfds_source import export_tfds_images, from_tfds, use_local

__all__ = ["load_sop"]

HOW_TO_GET = (
    "Download Stanford_Online_Products.zip from "
    "https://cvgl.stanford.edu/projects/lifted_struct/ and pass data_dir= the "
    "extracted Stanford_Online_Products folder (Ebay_train.txt, Ebay_test.txt and "
    "the <category>_final/ image folders) or its parent; or call load('sop') "
    "without data_dir where tfds can download 'stanford_online_products'."
)


def load_sop(data_dir=None, source="auto"):
    """Loads SOP: 11,318 train classes (59,551 images), 11,316 test classes.

    The list files have a header line `image_id class_id super_class_id path`
    and paths relative to the folder holding them.

    Args:
        data_dir: The `Stanford_Online_Products` folder or its parent.
            Defaults to `None`.
        source: `"auto"`, `"local"` or `"tfds"`. Defaults to `"auto"`.

    Returns:
        A `DMLSplits` of file-based `LabeledImages`; class names are
        `"<class_id>"`.
    """
    if use_local(data_dir, source):
        return _load_local(data_dir)
    return from_tfds("sop", HOW_TO_GET, lambda: _load_tfds(data_dir))


def _read_list(root, filename, what):
    fields = ("image_id", "class_id", "super_class_id", "path")
    rows = read_rows(os.path.join(root, filename), fields, skip=1,
                     check=integer_fields(1, names=fields))
    paths = [os.path.join(root, r[3]) for _, r in rows]
    classes = [int(r[1]) for _, r in rows]
    paths, classes, skipped = check_image_files(
        paths, classes, f"sop {what}", [f"{filename} line {line}" for line, _ in rows])
    split = labeled_from_raw(classes, paths=paths, what=f"sop {what}")
    split.skipped = skipped
    return split


def _load_local(data_dir):
    root = find_root(data_dir, *MARKERS["sop"], "sop", HOW_TO_GET)
    return DMLSplits(name="sop", train=_read_list(root, "Ebay_train.txt", "train"),
                     test=_read_list(root, "Ebay_test.txt", "test"))


def _load_tfds(data_dir):
    exported = export_tfds_images("stanford_online_products", "class_id",
                                  ("train", "test"), data_dir)
    splits = {k: labeled_from_raw(labels, paths=paths, what=f"sop {k}")
              for k, (paths, labels) in exported.items()}
    return DMLSplits(name="sop", train=splits["train"], test=splits["test"])
