"""Catalogue image files by id, only from under the catalogue's root folder, and only
the images of the catalogue's items."""

import os
from urllib.parse import quote

__all__ = ["IMAGE_EXTENSIONS", "MAX_PATH_CHARS", "image_file", "image_url", "is_item",
           "plausible_path"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")
MAX_PATH_CHARS = 1024  # an image path's length at most (a file name's: 255)


def plausible_path(relative):
    """Whether `relative` could name a catalogue image, judged from the text alone (no
    file system call): at most `MAX_PATH_CHARS` long, each name at most 255, no NUL,
    an image's extension."""
    return (0 < len(relative) <= MAX_PATH_CHARS and "\x00" not in relative
            and all(len(name) <= 255 for name in relative.split("/"))
            and relative.lower().endswith(IMAGE_EXTENSIONS))


def image_file(root, relative):
    """The real path of image `relative` under `root`, or None when it is not a file
    there: `..` steps, absolute paths and symbolic links that end outside `root`
    (after resolving them) give None, as do files that are not images."""
    if not root or not relative or "\x00" in relative:
        return None
    real_root = os.path.realpath(root)
    path = os.path.realpath(os.path.join(real_root, relative))
    if not path.startswith(real_root + os.sep) or not os.path.isfile(path):
        return None
    if not path.lower().endswith(IMAGE_EXTENSIONS):
        return None
    return path


def image_url(root, item_id, metadata=None):
    """`/images/<path>` for an item's image file under `root` (its metadata's "path",
    else its id when that names a file there), else None."""
    path = metadata.get("path") if isinstance(metadata, dict) else None
    path = path if isinstance(path, str) else item_id
    if not isinstance(path, str) or image_file(root, path) is None:
        return None
    return "/images/" + quote(path)


def is_item(catalogue, relative):
    """Whether `relative` is an item's image of `catalogue` (a
    `keras_dml.serve.catalogue.Catalogue`): an item's id, or its metadata's "path"
    (one Milvus query, at most one row read)."""
    from keras_dml.index.catalogue import PATH_FIELD
    from keras_dml.index.filters import milvus_literal
    from keras_dml.index.milvus import metadata_path

    store = catalogue._store  # the catalogue's MilvusStore
    literal = milvus_literal(relative)
    expression = f"{metadata_path(PATH_FIELD)} == {literal}"
    if store.record.get("id_kind") == "str":
        expression = f"id == {literal} or {expression}"
    rows = store._call(store._client.query, store.collection, filter=expression,
                       output_fields=["id"], limit=1)
    return bool(rows)
