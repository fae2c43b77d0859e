"""Input checks: clear errors before the backend sees bad data.

Tensors for losses and models; NumPy arrays (the `*_array` functions) for
evaluation, the index and the plots.
"""

import keras
import numpy as np

from keras_dml.backend import primitives

__all__ = ["SEARCH_METRICS", "check_class_labels", "check_embeddings", "check_label_range",
           "check_label_values", "check_labels_and_embeddings", "check_no_overflow",
           "check_search_metric", "embedding_array", "label_array"]


def check_class_labels(labels, batch_size=None, name="labels"):
    """Validate integer class labels of shape (N,) or (N, 1); return int32 (N,).

    Floats are accepted only when they hold whole numbers (Keras may convert
    labels to float): where the values are known (eager), they are checked, and a
    fractional label is a ValueError; in a TensorFlow graph, a run-time assertion.
    Jitted JAX has no run-time check: `DMLModel.fit` checks labels where they enter.
    """
    if isinstance(labels, (np.ndarray, list, tuple)):
        kind = np.asarray(labels).dtype.kind
        if kind in "USO":
            check_label_values(labels, name=name)  # the message for strings
    labels = keras.ops.convert_to_tensor(labels)
    dtype = keras.backend.standardize_dtype(labels.dtype)
    if dtype == "bool" or dtype.startswith("complex") or dtype == "string":
        raise ValueError(f"{name} must be integer class ids, got dtype {dtype}.")
    rank = len(labels.shape)
    if rank == 2 and labels.shape[1] == 1:
        labels = keras.ops.reshape(labels, [-1])
    elif rank != 1:
        raise ValueError(
            f"{name} must have shape (N,) or (N, 1) of integer class ids, got shape "
            f"{tuple(labels.shape)}."
        )
    if batch_size is not None and labels.shape[0] is not None and labels.shape[0] != batch_size:
        raise ValueError(
            f"{name} and embeddings disagree in batch size: {name} has shape "
            f"{tuple(labels.shape)}, embeddings have {batch_size} rows."
        )
    values = _values(labels)
    if values is not None:
        check_label_values(values, name=name)
    elif dtype != "int32":  # run time: fractional or huge ids would merge classes
        labels = primitives.assert_that(
            labels, lambda: _whole_and_small(labels),
            f"{name} must be integer class ids below 2**24 in magnitude; got values such as",
            [labels])
    return labels if dtype == "int32" else keras.ops.cast(labels, "int32")


def _values(x):
    """The values of tensor `x` as a NumPy array, or None while tracing (a TensorFlow
    graph, a JAX tracer): the checks run on values where they can."""
    return keras.ops.convert_to_numpy(x) if primitives.is_concrete(x) else None


def _whole_and_small(labels):
    """Whether every label is a whole number below `MAX_EXACT_LABEL` in magnitude (a
    TensorFlow graph's run-time check, in float64 as TensorFlow runs it)."""
    wide = keras.ops.cast(labels, "float64")
    exact = keras.ops.all(keras.ops.equal(keras.ops.round(wide), wide))
    return keras.ops.logical_and(exact, keras.ops.all(keras.ops.abs(wide) < MAX_EXACT_LABEL))


def check_embeddings(embeddings, name="embeddings"):
    """Validate a float (N, d) embedding batch; eager NaN/Inf is a ValueError."""
    embeddings = keras.ops.convert_to_tensor(embeddings)
    dtype = keras.backend.standardize_dtype(embeddings.dtype)
    if not keras.backend.is_float_dtype(dtype):
        raise ValueError(f"{name} must be floating point, got dtype {dtype}.")
    if len(embeddings.shape) != 2:
        raise ValueError(
            f"{name} must have rank 2, shape (batch, dim), got shape {tuple(embeddings.shape)}."
        )
    values = _values(embeddings)
    if values is not None and not np.isfinite(values).all():
        count = int(np.sum(~np.isfinite(values)))
        raise ValueError(
            f"{name} contain {count} NaN or Inf values: the model diverged or the input "
            "is corrupt; refusing to train on them."
        )
    return embeddings


def check_labels_and_embeddings(labels, embeddings):
    """`check_embeddings` and `check_class_labels` for one batch; returns both, checked."""
    embeddings = check_embeddings(embeddings)
    labels = check_class_labels(labels, batch_size=embeddings.shape[0])
    return labels, embeddings


def check_label_range(labels, size, name="labels", bound="num_classes"):
    """Check 0 <= labels < size (`bound` names the size in messages), e.g. class ids.

    Eager: a ValueError naming the offending values. In a tf.function: a
    `tf.errors.InvalidArgumentError` at run time. XLA drops run-time assertions and
    jitted JAX has none, so there a caller that gathers with the labels must guard
    itself (`ProxyLoss.call` turns the loss into NaN rather than matching a wrong proxy).
    """
    values = _values(labels)
    if values is not None:
        bad = values[(values < 0) | (values >= size)]
        if bad.size:
            raise ValueError(
                f"{name} must lie in [0, {bound}) = [0, {size}), got "
                f"{bad.size} out-of-range values such as {np.unique(bad)[:5].tolist()}."
            )
        return labels
    return primitives.assert_that(
        labels, lambda: keras.ops.all((labels >= 0) & (labels < size)),
        f"{name} must lie in [0, {bound}) = [0, {size}); got values such as", [labels])


#: Keras' `Loss.__call__` converts labels to float32, where integers are exact only
#: below 2**24: larger ids (hashed or database ids) would silently merge classes.
MAX_EXACT_LABEL = 2**24


def check_label_values(values, num_classes=None, name="labels"):
    """Check class labels in NumPy where they enter (`DMLModel.fit`: an array on each
    call, a dataset's first batch on its first call).

    A ValueError naming the offending values for: strings (map them to ids,
    e.g. `np.unique(names, return_inverse=True)[1]`), floats with a fractional
    part or NaN, ids with `|id| >= 2**24` (not exact in float32; remap them to
    dense ids, as `keras_dml.data.class_balanced_batches` does), and, given
    `num_classes` (proxy losses), ids outside `[0, num_classes)`.
    """
    values = np.asarray(values)
    if values.dtype.kind in "USO":
        raise ValueError(
            f"{name} must be integer class ids, got strings such as "
            f"{values.reshape(-1)[:3].tolist()}; map them to ids first, e.g. "
            "ids = np.unique(names, return_inverse=True)[1].")
    if values.dtype.kind not in "iuf" and values.dtype != bool:
        raise ValueError(f"{name} must be integer class ids, got dtype {values.dtype}.")
    flat = values.reshape(-1)
    if values.dtype.kind == "f":
        bad = flat[~np.isfinite(flat) | (flat != np.round(flat))]
        if bad.size:
            raise ValueError(
                f"{name} must be integer class ids, got {bad.size} non-integer values such "
                f"as {np.unique(bad)[:5].tolist()} (they would be truncated).")
    big = flat[np.abs(flat.astype(np.float64)) >= MAX_EXACT_LABEL]
    if big.size:
        raise ValueError(
            f"{name} must be below 2**24 in magnitude (Keras compares labels in float32, "
            f"where larger ids merge), got {np.unique(big)[:5].tolist()}; remap them to "
            "dense ids, e.g. np.unique(ids, return_inverse=True)[1].")
    if num_classes is not None:
        bad = flat[(flat < 0) | (flat >= num_classes)]
        if bad.size:
            raise ValueError(
                f"{name} must lie in [0, num_classes) = [0, {num_classes}), got "
                f"{bad.size} out-of-range values such as {np.unique(bad)[:5].tolist()}.")
    return values


def check_no_overflow(value, embeddings, loss_name):
    """Eager: a non-finite loss from finite embeddings is a ValueError (float32 overflow
    on huge embeddings), not an inf for the optimizer. Graph: `DMLModel` skips the step."""
    values = _values(value)
    if values is not None and not np.isfinite(values).all():
        largest = float(np.max(np.abs(_values(embeddings).astype(np.float32))))
        raise ValueError(
            f"{loss_name}: the loss overflows float32 on these embeddings (largest "
            f"|value| {largest:.3g}); normalize or scale them down (e.g. an "
            "l2-normalized EmbeddingHead).")
    return value


# -- NumPy arrays: evaluation, index, plots ----------------------------------------
SEARCH_METRICS = ("cosine", "dot", "euclidean")  # the `metric=` of kNN search and the index


def embedding_array(embeddings, name="embeddings"):
    """Return `embeddings` as a finite float32 NumPy array of shape (N, d)."""
    array = _numpy(embeddings)
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


def label_array(labels, num_samples, name="labels"):
    """Return `labels` as a 1-D NumPy array of length `num_samples`."""
    array = _numpy(labels)
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


def _numpy(x):
    """`x` (an array, a list, a tensor of any backend) as a NumPy array."""
    if isinstance(x, (np.ndarray, list, tuple)) or np.isscalar(x):
        return np.asarray(x)
    return keras.ops.convert_to_numpy(x)


def check_search_metric(metric):
    """`metric` if it is one of `SEARCH_METRICS`, else a ValueError."""
    if metric not in SEARCH_METRICS:
        raise ValueError(f"metric must be one of {SEARCH_METRICS}, got {metric!r}.")
    return metric
