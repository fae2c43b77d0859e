"""A catalogue of image files: listed from a folder or a CSV, embedded, saved as `.npz`.

`list_images(DIR or CSV)` lists every image with its id (path relative to the
folder, or as the CSV lists it) and class name; `embed_files` embeds image
files with a progress bar in images per second; `save_embeddings` writes the
`.npz` that `keras-dml embed` writes, which NumPy reads without keras_dml:

    embeddings  float32 (n, d)
    ids         str (n,): paths relative to the folder / as in the CSV
    labels      str (n,): class names, "" for an image outside a class folder
                (present when any image has a class)
"""

import collections.abc
import dataclasses
import os

import numpy as np

from keras_dml.hyperparameters import renamed_keywords

__all__ = ["Catalogue", "embed_files", "list_images", "save_embeddings"]

UNLABELLED = ""  # the label of an image outside any class folder (as `Index`'s unknown)


@dataclasses.dataclass
class Catalogue:
    """Listed image files.

    Attributes:
        root: Absolute folder the ids are relative to (a CSV file's folder).
        paths: Absolute image paths.
        ids: Paths relative to `root` (absolute where a CSV lists a file outside it).
        labels: Class name per image, `UNLABELLED` for one outside a class folder.
    """

    root: str
    paths: list
    ids: list
    labels: list

    def __len__(self):
        return len(self.paths)

    @property
    def labelled(self):
        """Whether any image has a class."""
        return any(label != UNLABELLED for label in self.labels)


def list_images(source):
    """Every image of a folder or a CSV list, in a stable order.

    A folder is read recursively as `keras_dml.datasets.from_directory` reads
    it (`root/<class>/<image>`, or `root/train|test|query|gallery/<class>/`,
    hidden and non-image files skipped with one counted warning); images lying
    directly in the folder are listed too, without a class. A CSV file is read
    by `keras_dml.datasets.from_csv` (columns `path,label[,split]`): all its
    rows, whatever their split.

    Args:
        source: A folder or a CSV file.

    Returns:
        A `Catalogue`.

    Raises:
        FileNotFoundError: `source` does not exist.
        ValueError: It holds no image (or, for a CSV, see `from_csv`).
    """
    source = os.path.abspath(os.path.expanduser(os.fspath(source)))
    if not os.path.exists(source):
        raise FileNotFoundError(f"{source} does not exist: give a folder of images (class "
                                "folders optional) or a CSV file with path,label columns.")
    if os.path.isdir(source):
        return _from_folder(source)
    return _from_csv(source)


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


def _from_csv(path):
    from keras_dml.datasets import from_csv

    splits = from_csv(path)
    listed = [splits.train, splits.test]
    paths = [p for split in listed for p in split.paths]
    labels = [split.class_names[label] for split in listed for label in split.labels]
    order = np.argsort(paths, kind="stable")
    root = os.path.dirname(path)
    paths = [paths[i] for i in order]
    ids = [os.path.relpath(p, root) if p.startswith(root + os.sep) else p for p in paths]
    return Catalogue(root, paths, ids, [str(labels[i]) for i in order])


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
