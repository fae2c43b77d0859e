"""Input checks for evaluation: clear ValueErrors before TensorFlow sees bad data."""

import numpy as np

DISTANCES = ("cosine", "dot", "euclidean")


def as_embeddings(embeddings, name="embeddings"):
    """Return `embeddings` as a finite float32 NumPy array of shape (N, d)."""
    if hasattr(embeddings, "numpy"):
        embeddings = embeddings.numpy()
    array = np.asarray(embeddings)
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise ValueError(f"{name} must be a numeric array, got dtype {array.dtype}.")
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(
            f"{name} must have shape (num_samples, dim) with both > 0, got shape {array.shape}."
        )
    array = np.ascontiguousarray(array, dtype=np.float32)
    finite = np.isfinite(array)
    if not finite.all():
        rows = np.flatnonzero(~finite.all(axis=1))
        raise ValueError(
            f"{name} contain NaN or Inf in {rows.size} rows (first rows: {rows[:5].tolist()})."
        )
    return array


def as_labels(labels, num_samples, name="labels"):
    """Return `labels` as a 1-D NumPy array of length `num_samples`."""
    if hasattr(labels, "numpy"):
        labels = labels.numpy()
    array = np.asarray(labels)
    if array.ndim == 2 and array.shape[1] == 1:
        array = array[:, 0]
    if array.ndim != 1:
        raise ValueError(f"{name} must have shape (N,) or (N, 1), got shape {array.shape}.")
    if array.shape[0] != num_samples:
        raise ValueError(
            f"{name} has {array.shape[0]} entries but the embeddings have {num_samples} rows."
        )
    if np.issubdtype(array.dtype, np.floating) and not np.isfinite(array).all():
        raise ValueError(f"{name} contain NaN or Inf.")
    return array


def check_distance(distance):
    if distance not in DISTANCES:
        raise ValueError(f"distance must be one of {DISTANCES}, got {distance!r}.")
    return distance
