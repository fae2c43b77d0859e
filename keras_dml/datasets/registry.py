"""`load(name, data_dir, split)`: one entry point for every supported dataset."""

import importlib

__all__ = ["available", "load"]

_LOADERS = {
    "digits": "keras_dml.datasets.digits:load_digits_splits",
    "omniglot": "keras_dml.datasets.omniglot:load_omniglot",
    "cub200": "keras_dml.datasets.cub200:load_cub200",
    "cars196": "keras_dml.datasets.cars196:load_cars196",
    "sop": "keras_dml.datasets.sop:load_sop",
    "inshop": "keras_dml.datasets.inshop:load_inshop",
    "folder": "keras_dml.datasets.files:load_folder",
    "csv": "keras_dml.datasets.files:load_csv",
}
# Loaders of a user's own files: they take the split's `test_classes` and `seed`.
_OWN_FILES = ("folder", "csv")


def available():
    """Names accepted by `load`."""
    return sorted(_LOADERS)


def load(name, data_dir=None, split=None, source="auto", **options):
    """Loads a deep metric learning dataset with its class-disjoint split.

    Protocols: CUB-200-2011 and Cars196, first half of the classes train and
    second half test; SOP, the official `Ebay_train.txt` / `Ebay_test.txt`;
    In-Shop, the official train / query / gallery partition; Omniglot,
    background / evaluation; digits, 0-4 / 5-9. Your own images: `"folder"`
    (`root/<class>/<image>`, see `from_directory`) and `"csv"` (a
    `path,label[,split]` list, see `from_csv`), split as given or by class.

    Args:
        name: One of `available()`: `"digits"`, `"omniglot"`, `"cub200"`,
            `"cars196"`, `"sop"`, `"inshop"`, `"folder"`, `"csv"`.
        data_dir: Folder holding the dataset in its official layout (or its
            parent). Defaults to `None`: use `tfds` (downloads when the
            machine can reach the dataset host; In-Shop has no tfds build).
        split: `None` for the `DMLSplits`, or one of `"train"`, `"test"`
            (`"query"`, `"gallery"` for In-Shop) for that `LabeledImages`.
            Defaults to `None`.
        source: `"auto"` (local folder when `data_dir` is given, else tfds),
            `"local"` or `"tfds"`. Defaults to `"auto"`.
        **options: For `"folder"` and `"csv"` only: `test_classes` and `seed`
            of `from_directory`.

    Returns:
        A `DMLSplits` (or one `LabeledImages` when `split` is given). Labels
        are remapped to 0..C-1 within each split.

    Examples:

    >>> splits = keras_dml.datasets.load("digits")
    >>> splits.train.num_classes, splits.test.num_classes
    (5, 5)
    """
    key = str(name).lower().replace("-", "").replace("_", "")
    key = {"cub": "cub200", "cub2002011": "cub200", "cars": "cars196",
           "stanfordonlineproducts": "sop", "inshopclothes": "inshop"}.get(key, key)
    if key not in _LOADERS:
        raise ValueError(f"Unknown dataset {name!r}; expected one of {available()} "
                         "(your own images: 'folder' with data_dir=root/<class>/<image>, "
                         "or 'csv' with data_dir=a path,label list).")
    if options and key not in _OWN_FILES:
        raise ValueError(f"{', '.join(sorted(options))}: only for the 'folder' and 'csv' "
                         f"datasets; {key} has its own protocol split.")
    if source not in ("auto", "local", "tfds"):
        raise ValueError(f"source must be 'auto', 'local' or 'tfds'; got {source!r}.")
    module, function = _LOADERS[key].split(":")
    loader = getattr(importlib.import_module(module), function)
    splits = loader(data_dir=data_dir, source=source, **options)
    return splits if split is None else splits[split]
