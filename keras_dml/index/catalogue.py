"""A catalogue of image files: listed from a folder or a CSV, embedded, saved as `.npz`.

`list_images(DIR or CSV)` lists every image with its id (path relative to the
folder, or as the CSV lists it, or a CSV column's value), class name and
metadata (`{"path": id path, other CSV columns...}`); `embed_files` embeds image
files with a progress bar in images per second; `save_embeddings` writes the
`.npz` that `keras-dml embed` writes, which NumPy reads without keras_dml:

    embeddings  float32 (n, d)
    ids         str (n,): paths relative to the folder / as in the CSV
    labels      str (n,): class names, "" for an image outside a class folder
                (present when any image has a class)
"""

import collections.abc
import dataclasses
import math
import os
import re

import numpy as np

from keras_dml.hyperparameters import renamed_keywords

__all__ = ["Catalogue", "PATH_FIELD", "RELATIVE_PATH", "column_values", "embed_files",
           "list_images", "save_embeddings"]

UNLABELLED = ""  # the label of an image outside any class folder (as `Index`'s unknown)
PATH_FIELD = "path"  # the metadata field of an item's image path, relative to the root
RELATIVE_PATH = "relative_path"  # the id layout of ids that are paths relative to the root
COLUMN_LAYOUT = "column:"  # + a CSV column's name: the id layout of ids taken from it
_INTEGER = re.compile(r"[+-]?(0|[1-9][0-9]*)")
_DECIMAL = re.compile(r"[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?")


@dataclasses.dataclass
class Catalogue:
    """Listed image files.

    Attributes:
        root: Absolute folder the ids are relative to (a CSV file's folder).
        paths: Absolute image paths.
        ids: Paths relative to `root` (absolute where a CSV lists a file outside it),
            or the values of the CSV column `list_images` was given as `id_column`.
        labels: Class name per image, `UNLABELLED` for one outside a class folder.
        metadata: Per image a dict: `PATH_FIELD` (its path as in `ids` without an id
            column) and the CSV's other columns (`column_values`). Defaults to the
            paths alone.
        id_layout: What the ids are: `RELATIVE_PATH`, or `"column:<name>"`.
    """

    root: str
    paths: list
    ids: list
    labels: list
    metadata: list = None
    id_layout: str = RELATIVE_PATH

    def __post_init__(self):
        if self.metadata is None:
            self.metadata = [{PATH_FIELD: i} for i in self.ids]

    def __len__(self):
        return len(self.paths)

    @property
    def labelled(self):
        """Whether any image has a class."""
        return any(label != UNLABELLED for label in self.labels)


def list_images(source, id_column=None):
    """Every image of a folder or a CSV list, in a stable order.

    A folder is read recursively as `keras_dml.datasets.from_directory` reads
    it (`root/<class>/<image>`, or `root/train|test|query|gallery/<class>/`,
    hidden and non-image files skipped with one counted warning); images lying
    directly in the folder are listed too, without a class. A CSV file is read
    by `keras_dml.datasets.from_csv` (columns `path,label[,split]`): all its
    rows, whatever their split; its other columns go into each image's
    metadata, typed by `column_values`.

    Args:
        source: A folder or a CSV file.
        id_column: A CSV column whose values (text, as written) are the ids, in
            place of the paths; it is left out of the metadata. Defaults to None.

    Returns:
        A `Catalogue`.

    Raises:
        FileNotFoundError: `source` does not exist.
        ValueError: It holds no image (or, for a CSV, see `from_csv`); for
            `id_column`: a folder, a column the CSV does not have (its columns
            are named), an empty id (its line) or an id on several rows (their
            lines), found before any image is read.
    """
    source = os.path.abspath(os.path.expanduser(os.fspath(source)))
    if not os.path.exists(source):
        raise FileNotFoundError(f"{source} does not exist: give a folder of images (class "
                                "folders optional) or a CSV file with path,label columns.")
    if os.path.isdir(source):
        if id_column is not None:
            raise ValueError(f"{source} is a folder: ids from a column (--id-column "
                             f"{id_column}) need a CSV list of the images.")
        return _from_folder(source)
    return _from_csv(source, id_column)


def _from_folder(root):
    from keras_dml.datasets.files import SPLITS, ImageListing

    listing = ImageListing()
    folders, files = listing.entries(root)
    loose = sorted(listing.images_among(root, files))
    parts = [part for part in SPLITS if part in folders]
    if parts:
        for part in parts:
            listing.add_classes(os.path.join(root, part), part)
    elif folders:
        listing.add_classes(root, None, (folders, []))
    listing.warn(f"{root}")
    if not loose and not listing.paths:
        raise ValueError(f"{root} holds no image (image files end in .jpg, .jpeg, .png, .gif "
                         "or .bmp, any case).")
    paths = loose + listing.paths
    labels = [UNLABELLED] * len(loose) + [str(name) for name in listing.classes]
    return Catalogue(root, paths, [os.path.relpath(p, root) for p in paths], labels)


def _from_csv(path, id_column=None):
    from keras_dml.datasets import from_csv
    from keras_dml.datasets.files import csv_columns

    names, cells = csv_columns(path)
    if id_column is not None:
        id_column = _id_column(path, id_column, names)
        _check_ids(path, id_column, cells)
    splits = from_csv(path)
    listed = [splits.train, splits.test]
    paths = [p for split in listed for p in split.paths]
    labels = [split.class_names[label] for split in listed for label in split.labels]
    order = np.argsort(paths, kind="stable")
    root = os.path.dirname(path)
    paths = [paths[i] for i in order]
    relative = [os.path.relpath(p, root) if p.startswith(root + os.sep) else p for p in paths]
    rows = [cells[p][1] for p in paths]
    columns = {name: column_values([row[name] for row in rows])
               for name in names if name != id_column}
    metadata = [{PATH_FIELD: relative[i], **{name: values[i] for name, values in columns.items()}}
                for i in range(len(paths))]
    if id_column is None:
        return Catalogue(root, paths, relative, [str(labels[i]) for i in order], metadata)
    return Catalogue(root, paths, [row[id_column] for row in rows],
                     [str(labels[i]) for i in order], metadata, COLUMN_LAYOUT + id_column)


def column_values(cells):
    """A CSV column's cells as JSON values of one type: integers when every
    non-empty cell is an integer (without leading zeros, which mark a code such as
    "007"; text if one needs more than 64 bits), else floats when every one is a decimal number
    ("10", "10.5", "1e3"), else the text as written. An empty cell is None (null).
    """
    given = [cell for cell in cells if cell]
    if given and all(_INTEGER.fullmatch(cell) for cell in given):
        kind = int if all(abs(int(cell)) < 2 ** 63 for cell in given) else str
    elif given and all(_DECIMAL.fullmatch(cell) and math.isfinite(float(cell))
                       for cell in given):
        kind = float
    else:
        kind = str
    return [kind(cell) if cell else None for cell in cells]


def _id_column(path, name, names):
    """The column `name` as the CSV writes it (matched ignoring case, as path and label)."""
    found = [column for column in names if column.lower() == str(name).strip().lower()]
    if not found:
        others = (f"besides path and label (and split) it has the columns {', '.join(names)}"
                  if names else "it has no column besides path, label and split")
        what = (f"{name!r} names the images' {str(name).strip().lower()}s, not their ids"
                if str(name).strip().lower() in ("path", "label", "split") else
                f"{path} has no column {name!r}")
        raise ValueError(f"--id-column {name}: {what}; {others}.")
    return found[0]


def _check_ids(path, column, cells):
    """Refuses an empty id or an id on several rows, naming the lines."""
    lines = {}
    for line, row in sorted(cells.values(), key=lambda item: item[0]):
        if not row[column]:
            raise ValueError(f"{path}, line {line}: empty {column!r}, the id column; every "
                             "image needs an id.")
        lines.setdefault(row[column], []).append(line)
    repeated = [(value, found) for value, found in lines.items() if len(found) > 1]
    if repeated:
        shown = "; ".join(f"{value!r} on lines {', '.join(map(str, found))}"
                          for value, found in repeated[:5])
        more = f" (and {len(repeated) - 5} more)" if len(repeated) > 5 else ""
        raise ValueError(f"{path}: ids of column {column!r} repeat: "
                         f"{shown}{more}; each id must be on one row.")


@renamed_keywords(embedder="model")
def embed_files(model, paths, preprocessing, batch_size=64, progress=True):
    """float32 `(n, d)` embeddings of image files, in order, in inference mode
    (`keras_dml.inference.embed` of the paths).

    Args:
        model: A Keras model (or callable) mapping image batches to `(batch, d)`
            (`embedder=` is its deprecated name).
        paths: Image file paths.
        preprocessing: The `keras_dml.data.Preprocessing` the embedder's input
            needs (its evaluation transform is applied).
        batch_size: Images per batch. Defaults to 64.
        progress: Show a progress bar with images per second on stderr when it
            is a terminal. Defaults to True.

    Raises:
        ValueError: A file cannot be read or decoded (named), or the embedder
            does not return `(batch, d)`.
    """
    from keras_dml.data.inputs import PATHS, as_data
    from keras_dml.inference.entry import embed_data

    if isinstance(paths, collections.abc.Iterator):  # a generator, Path.glob(...)
        paths = list(paths)
    if isinstance(paths, (list, tuple, np.ndarray)) and not len(paths):
        raise ValueError("No image to embed.")
    files = as_data(paths, (PATHS,), "paths")
    return embed_data(model, files, batch_size, preprocessing=preprocessing,
                      progress=progress).embeddings


def save_embeddings(path, embeddings, ids, labels=None, overwrite=False):
    """Writes the `.npz` of a catalogue's embeddings (see the module docstring).

    Written to a temporary file and renamed, so a failed write leaves no
    partial file. `labels` is stored when given.

    Raises:
        FileExistsError: `path` exists and `overwrite` is False.
    """
    path = os.fspath(path)
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"{path} exists; pass --overwrite (overwrite=True) to replace it.")
    if os.path.isdir(path):
        raise FileExistsError(f"{path} is a folder; give a file name such as embeddings.npz.")
    arrays = {"embeddings": np.asarray(embeddings, np.float32), "ids": np.asarray(ids, str)}
    if labels is not None:
        arrays["labels"] = np.asarray(labels, str)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    staging = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(staging, "wb") as handle:  # a handle: NumPy appends no ".npz"
            np.savez(handle, **arrays)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.remove(staging)
    return path
