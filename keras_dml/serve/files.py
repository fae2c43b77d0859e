"""Catalogue image files by id, only from under the catalogue's root folder."""

import os
from urllib.parse import quote

__all__ = ["IMAGE_EXTENSIONS", "image_file", "image_url"]

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".gif", ".bmp", ".webp")


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


def image_url(root, item_id):
    """`/images/<id>` for an item whose id names an image file under `root`, else None."""
    if not isinstance(item_id, str) or image_file(root, item_id) is None:
        return None
    return "/images/" + quote(item_id)
