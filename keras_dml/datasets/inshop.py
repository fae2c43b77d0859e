"""In-Shop Clothes Retrieval: the official train / query / gallery partition."""

import os

import numpy as np

from keras_dml.datasets.base import DMLSplits, check_image_files, labeled_from_raw
from keras_dml.datasets.layout import MARKERS, find_root, read_rows

__all__ = ["load_inshop"]

HOW_TO_GET = (
    "Download the In-shop Clothes Retrieval Benchmark (DeepFashion) from "
    "https://mmlab.ie.cuhk.edu.hk/projects/DeepFashion/InShopRetrieval.html: "
    "Eval/list_eval_partition.txt and Img/img.zip (extracted to Img/img/); pass "
    "data_dir= the benchmark folder. There is no tfds build of In-Shop."
)


def load_inshop(data_dir=None, source="auto"):
    """Loads In-Shop: 3,997 train items; query and gallery of 3,985 test items.

    `list_eval_partition.txt` (in `data_dir` or `data_dir/Eval`) has a count
    line, a header `image_name item_id evaluation_status`, then one line per
    image with status `train`, `query` or `gallery`. Image names start with
    `img/` and are looked up under `data_dir` and `data_dir/Img`.

    Args:
        data_dir: The benchmark folder. Defaults to `None`.
        source: `"auto"` or `"local"` (no tfds build). Defaults to `"auto"`.

    Returns:
        A `DMLSplits` with `train`, `query`, `gallery` and `test` (query
        followed by gallery); query and gallery share the test label space.
    """
    if source == "tfds":
        raise ValueError(f"inshop has no tfds build. {HOW_TO_GET}")
    root = find_root(data_dir, *MARKERS["inshop"], "inshop", HOW_TO_GET)
    numbered = read_rows(os.path.join(root, "list_eval_partition.txt"),
                         ("image_name", "item_id", "evaluation_status"), skip=2,
                         check=_check_row)
    rows = [row for _, row in numbered]
    image_root = _image_root(root, data_dir, rows[0][0])
    paths = [os.path.join(image_root, r[0]) for r in rows]
    items = [int(r[1].split("_")[-1]) for r in rows]
    status = np.array([r[2] for r in rows])
    names = {int(r[1].split("_")[-1]): r[1] for r in rows}
    kept_paths, kept_items, skipped = check_image_files(
        paths, items, "inshop", [f"list_eval_partition.txt line {n}" for n, _ in numbered])
    kept = set(kept_paths)
    status = np.array([s for p, s in zip(paths, status) if p in kept])
    kept_paths = np.array(kept_paths, dtype=object)
    train_rows = np.flatnonzero(status == "train")
    test_rows = np.concatenate([np.flatnonzero(status == "query"),
                                np.flatnonzero(status == "gallery")])
    train = labeled_from_raw(kept_items[train_rows], paths=list(kept_paths[train_rows]),
                             names=names, what="inshop train")
    test = labeled_from_raw(kept_items[test_rows], paths=list(kept_paths[test_rows]),
                            names=names, what="inshop test")
    num_query = int((status == "query").sum())
    query = test.subset(np.arange(num_query), remap=False)
    gallery = test.subset(np.arange(num_query, len(test)), remap=False)
    for split in (train, test):
        split.skipped = skipped
    return DMLSplits(name="inshop", train=train, test=test, query=query, gallery=gallery)


def _image_root(root, data_dir, first_name):
    parent = os.path.dirname(root) if os.path.basename(root) == "Eval" else root
    for base in (parent, os.path.join(parent, "Img"), str(data_dir)):
        if os.path.exists(os.path.join(base, first_name)):
            return base
    return parent


def _check_row(row):
    if row[2] not in ("train", "query", "gallery"):
        return "evaluation_status must be train, query or gallery"
    try:
        int(row[1].split("_")[-1])
    except ValueError:
        return "item_id must end in a number (id_00000001)"
    return None
