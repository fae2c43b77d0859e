"""Sample labels as class ids, and telling image paths from images (NumPy only)."""

import os

import numpy as np

__all__ = ["is_paths", "label_ids"]


def is_paths(x):
    """Whether `x` is a list (or array) of image file paths (str, bytes or
    `os.PathLike`) rather than images."""
    path = (str, bytes, os.PathLike)
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "US" or (x.dtype == object and len(x) and isinstance(
            x.flat[0], path))
    return isinstance(x, (list, tuple)) and len(x) > 0 and isinstance(x[0], path)


def label_ids(y, n):
    """`(ids, class names or None)` for `n` samples' labels `y`.

    Integer labels stay as they are (ids of 2**24 or more in magnitude, not exact in
    float32, become dense ids `0..C-1`); class names (strings) become ids in sorted
    order (`np.unique`), the names returned.
    """
    y = np.asarray(y)
    if y.ndim == 1 and len(y) and (y.dtype.kind in "US" or (
            y.dtype == object and all(isinstance(v, (str, bytes)) for v in y))):
        if len(y) != n:
            raise ValueError(f"{n} inputs but {len(y)} labels; they must match.")
        text = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in y.tolist()]
        names, ids = np.unique(np.asarray(text), return_inverse=True)
        return ids.reshape(-1).astype(np.int32), names.tolist()
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"labels must be a 1-D array of integer class ids or of class names (strings); "
            f"got shape {y.shape}, dtype {y.dtype}. Other values: map them to ids with "
            "ids = np.unique(labels, return_inverse=True)[1]."
        )
    if len(y) != n:
        raise ValueError(f"{n} inputs but {len(y)} labels; they must match.")
    if len(y) and np.abs(y.astype(np.float64)).max() >= 2**24:
        # Not exact in float32 (Keras' losses): hashed or database ids become dense ids
        # 0..C-1, which keeps every comparison exact.
        y = np.unique(y, return_inverse=True)[1].reshape(-1)
    return y, None
