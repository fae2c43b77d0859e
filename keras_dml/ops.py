"""Pure tensor functions shared by every loss, miner and metric.

Similarity matrices are always `query x key`: the key set may be the query batch
itself, a memory bank, the batch gathered from other replicas, or learnable proxies.
All reductions here are computed in float32, so they stay finite under
`mixed_float16` / `mixed_bfloat16` policies, and none of them casts to float64.
"""

import keras
import numpy as np

from keras_dml import backend
from keras_dml.backend import primitives

__all__ = ["FLOAT32_MAX", "FLOAT32_MIN", "METRICS", "NORM_EPSILON", "SIMILARITIES", "closest_below",
           "cond", "cosine_between", "first_pair_per_class", "grouped_softplus_lse",
           "in_xla_context", "inverse_norms", "is_distance", "l2_normalize", "label_masks",
           "logaddexp", "masked_fill", "masked_logsumexp", "masked_logsumexp_and_softmax",
           "masked_max", "masked_min", "masked_softmax", "masked_softmax_parts", "own_entries",
           "pairwise", "safe_arccos", "safe_sqrt", "scaled_softmax", "similarities_between_rows",
           "similarity_gradients", "softmax_cross_entropy", "to_float32", "unit_rows"]

SIMILARITIES = ("cosine", "dot")
DISTANCES = ("euclidean", "squared_euclidean")
METRICS = SIMILARITIES + DISTANCES

#: the largest and lowest finite float32 (masked-out entries of max / log-sum-exp)
FLOAT32_MAX = float(np.finfo(np.float32).max)
FLOAT32_MIN = float(np.finfo(np.float32).min)

# Smallest squared distance whose square root is differentiated; below it the
# gradient of the Euclidean distance is set to zero instead of infinity.
_SQRT_EPSILON = 1e-12


def is_distance(metric):
    """True when `metric` grows with dissimilarity (euclidean, squared_euclidean)."""
    check_metric(metric)
    return metric in DISTANCES


def check_metric(metric):
    """Raises a ValueError naming `metric` unless it is one of `METRICS`."""
    if metric not in METRICS:
        raise ValueError(f"Unknown metric {metric!r}: expected one of {METRICS}.")


def to_float32(x):
    """Cast half-precision (or integer) input to float32; keep float32 as it is."""
    x = primitives.as_tensor(x)
    return x if keras.backend.standardize_dtype(x.dtype) == "float32" \
        else keras.ops.cast(x, "float32")


NORM_EPSILON = 1e-12  # as tf.math.l2_normalize: a squared norm below it is held there


def l2_normalize(x, axis=-1, epsilon=NORM_EPSILON):
    """L2 normalisation that maps the zero vector to zero, not NaN.

    The values of `tf.math.l2_normalize` (the squared norm is held at `epsilon`
    from below), with the same gradient written out,
    g_x = (g - x (x . g) / |x|^2) / |x| (no radial part where the norm is held),
    in five elementwise passes instead of autodiff's longer chain.
    """

    @keras.ops.custom_gradient
    def unit(x):
        scale, norm = inverse_norms(x, axis, epsilon, keepdims=True)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _through_normalisation(x, upstream, scale, norm, axis)

        return x * scale, grad

    return unit(primitives.as_tensor(x))


def unit_rows(x):
    """NumPy twin of `l2_normalize` over the rows of a 2-D array, same epsilon: rows
    with a squared norm below `NORM_EPSILON` are divided by its square root."""
    x = np.asarray(x)
    return x / np.sqrt(np.maximum(np.sum(np.square(x), axis=1, keepdims=True), NORM_EPSILON))


def inverse_norms(x, axis=-1, epsilon=NORM_EPSILON, keepdims=False):
    """1 / max(|x|, sqrt(epsilon)) along `axis`, and (max(|x|^2, epsilon), whether
    the norm is not held there): what the normalisation's gradient takes."""
    squared_norm = keras.ops.sum(keras.ops.square(x), axis=axis, keepdims=keepdims)
    held = keras.ops.maximum(squared_norm, epsilon)
    return keras.ops.rsqrt(held), (held, squared_norm >= epsilon)


def _radial(projection, held, unclipped):
    """The radial part of the normalisation's gradient, projection / |x|^2; 0 where
    the norm is held (a constant there)."""
    return keras.ops.where(unclipped, projection / held, keras.ops.zeros_like(projection))


def _through_normalisation(x, upstream, inverse, norm, axis=-1):
    """The gradient w.r.t. x of x / |x| given the `upstream` gradient of x / |x|:
    (g - x (x . g) / |x|^2) / |x|, with `inverse` and `norm` from `inverse_norms`
    (keepdims) and no radial part where the norm is held."""
    along = _radial(keras.ops.sum(upstream * x, axis=axis, keepdims=True), *norm)
    return (upstream - x * along) * inverse


@keras.ops.custom_gradient
def self_products(x):
    """x x^T, whose backward is one matmul, (G + G^T) x, instead of two."""

    def grad(*args, upstream=None):
        upstream = args[0] if upstream is None else upstream
        return keras.ops.matmul(upstream + keras.ops.transpose(upstream), x)

    return primitives.matmul(x, x, transpose_b=True), grad


def safe_sqrt(squared):
    """sqrt(max(squared, 0)), 0 with a zero (not infinite) gradient where squared is ~0."""
    positive = squared > _SQRT_EPSILON
    return keras.ops.where(positive, keras.ops.sqrt(keras.ops.where(positive, squared, 1.0)),
                           0.0)


def cosine_between(query, key):
    """Cosine similarity (N, M) of query (N, d) to key (M, d).

    Both sides are normalised as (N, d) and (M, d) copies (`l2_normalize`) and
    multiplied, so no pass but the matmul touches an (N, M) matrix, forward or
    backward: each side's gradient is one matmul, then the normalisation's gradient
    on its rows.
    """
    return primitives.matmul(l2_normalize(to_float32(query)), l2_normalize(to_float32(key)),
                             transpose_b=True)


def similarity_gradients(query, key, weights, row_scale, metric="cosine", key_gradient=True,
                         block_rows=None):
    """Gradients of sum_aj row_scale_a W_aj sim(q_a, k_j) w.r.t. query and key, from W.

    For "cosine" and "dot" similarities, without the similarity matrix: two
    matmuls with W (N, M), `(W @ k^)` and `(W^T @ q^)` on the unit (cosine) or raw
    (dot) rows, then the normalisation's gradient on the (N, d) and (M, d)
    results, as `l2_normalize`'s (no radial part where a norm is held).

    Args:
        query: float32 (N, d). key: float32 (M, d).
        weights: float32 (N, M); on TensorFlow also a `tf.TensorArray` of its row
            blocks of `block_rows` rows each (the last may be shorter), read a block
            at a time and never concatenated (no second (N, M) copy).
        row_scale: float32 (N,), e.g. the upstream gradient of per-query values.
        metric: "cosine" or "dot".
        key_gradient: also the key's gradient (else zeros of its shape).
        block_rows: the rows of each block of a `tf.TensorArray` of weights (None: a
            tensor of weights).

    Returns:
        (query gradient (N, d), key gradient (M, d)).
    """
    if metric not in ("cosine", "dot"):
        raise ValueError(f"similarity_gradients takes metric 'cosine' or 'dot', got {metric!r}.")
    row_scale = keras.ops.expand_dims(row_scale, 1)
    if metric == "cosine":
        inv_q, q_norm = inverse_norms(query, axis=1, keepdims=True)
        inv_k, k_norm = inverse_norms(key, axis=1, keepdims=True)
        query_in, key_in = query * inv_q, key * inv_k
    else:
        query_in, key_in = query, key
    if block_rows is not None:
        from keras_dml.backend.tensorflow import row_blocks as tensorflow_row_blocks

        to_query, to_key = tensorflow_row_blocks.blocked_products(
            weights, block_rows, query_in, key_in, row_scale, key_gradient)
    else:
        to_query = keras.ops.matmul(weights, key_in) * row_scale
        to_key = (primitives.matmul(weights, query_in * row_scale, transpose_a=True)
                  if key_gradient else keras.ops.zeros_like(key))
    if metric == "dot":
        return to_query, to_key
    return (_through_normalisation(query, to_query, inv_q, q_norm),
            _through_normalisation(key, to_key, inv_k, k_norm) if key_gradient else to_key)


def pairwise(query, key=None, metric="cosine"):
    """Pairwise similarity or distance between every query and every key.

    Args:
        query: float tensor (N, d).
        key: float tensor (M, d). Defaults to `query`.
        metric: "cosine" (inputs are L2-normalised first), "dot",
            "euclidean" or "squared_euclidean".

    Returns:
        float32 tensor (N, M). Similarities for "cosine"/"dot", distances otherwise.
        The Euclidean distance has a zero (not infinite) gradient where two points
        coincide.
    """
    check_metric(metric)
    if metric == "cosine" and key is not None:
        return cosine_between(query, key)
    normalize = l2_normalize if metric == "cosine" else (lambda x: x)
    query = normalize(to_float32(query))
    if key is None:
        key, products = query, self_products(query)
    else:
        key = to_float32(key)
        products = primitives.matmul(query, key, transpose_b=True)
    if metric in SIMILARITIES:
        return products
    squared = (
        keras.ops.sum(keras.ops.square(query), axis=1, keepdims=True)
        - 2.0 * products
        + keras.ops.expand_dims(keras.ops.sum(keras.ops.square(key), axis=1), 0)
    )
    squared = keras.ops.maximum(squared, 0.0)
    return squared if metric == "squared_euclidean" else safe_sqrt(squared)


def similarities_between_rows(x, rows, columns, metric="cosine"):
    """S[i, j] = sim(x[rows[i]], x[columns[j]]), with a dense gradient w.r.t. x.

    The values of `pairwise(x[rows], x[columns], metric)`,
    and the same gradient, computed by hand: the normalisation's part on the R x K
    matrix rather than on the (R, d) rows, and the rows' gradients scattered
    straight into a dense (N, d) tensor (repeated indices add up), where autodiff
    would concatenate two sparse gradients and densify them. On a small loss
    (N-pair-mc's C x C matrix) that bookkeeping cost more than the matmuls.

    Args:
        x: float tensor (N, d).
        rows, columns: int32 indices (R,) and (K,) into x.
        metric: "cosine" (rows L2-normalised first, as `l2_normalize`) or "dot".

    Returns:
        float32 tensor (R, K).
    """
    if metric not in SIMILARITIES:
        raise ValueError(f"similarities_between_rows takes a metric in {SIMILARITIES}, "
                         f"got {metric!r}.")
    cosine = metric == "cosine"

    @keras.ops.custom_gradient
    def similarities(x):
        query, key = primitives.gather(x, rows), primitives.gather(x, columns)
        products = primitives.matmul(query, key, transpose_b=True)
        if not cosine:
            def dot_grad(*args, upstream=None):
                upstream = args[0] if upstream is None else upstream
                return _scatter_rows_gradient(
                    x, rows, keras.ops.matmul(upstream, key),
                    columns, primitives.matmul(upstream, query, transpose_a=True))

            return products, dot_grad
        # M = diag(s) Q K^T diag(t) with s, t the inverse norms. Its gradient is
        # worked out on the R x K matrix, so that each (R, d) block is touched once:
        #   dQ = (G * s t^T) K - diag(s^2 rowsum(G * M)) Q, and likewise dK.
        query_scale, query_norm = inverse_norms(query, axis=1)
        key_scale, key_norm = inverse_norms(key, axis=1)
        scales = keras.ops.expand_dims(query_scale, 1) * keras.ops.expand_dims(key_scale, 0)
        matrix = products * scales

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            weighted, along = upstream * scales, upstream * matrix
            query_radial = _radial(keras.ops.sum(along, axis=1), *query_norm)
            key_radial = _radial(keras.ops.sum(along, axis=0), *key_norm)
            query_grad = (keras.ops.matmul(weighted, key)
                          - query * keras.ops.expand_dims(query_radial, 1))
            key_grad = (primitives.matmul(weighted, query, transpose_a=True)
                        - key * keras.ops.expand_dims(key_radial, 1))
            return _scatter_rows_gradient(x, rows, query_grad, columns, key_grad)

        return matrix, grad

    return similarities(to_float32(x))


def _scatter_rows_gradient(x, rows, row_grad, columns, column_grad):
    """The dense gradient of x from the gradients of x[rows] and x[columns]: two
    scatters (concatenating the blocks first costs more); repeated indices add up."""
    n = keras.ops.shape(x)[0]
    return (primitives.scatter_rows(rows, row_grad, n)
            + primitives.scatter_rows(columns, column_grad, n))


def cond(predicate, if_true, if_false):
    """`keras.ops.cond` for a boolean tensor; for a Python bool (a choice made from
    static shapes) only the chosen branch is built."""
    if isinstance(predicate, (bool, np.bool_)):
        return if_true() if predicate else if_false()
    return keras.ops.cond(predicate, if_true, if_false)


def label_masks(query_labels, key_labels=None, exclude_self=None):
    """Positive and negative pair masks for a query x key similarity matrix.

    Args:
        query_labels: int tensor (N,).
        key_labels: int tensor (M,). Defaults to `query_labels`.
        exclude_self: remove the diagonal (a sample is not its own positive).
            Defaults to True exactly when `key_labels` is None.

    Returns:
        (positive, negative): bool tensors (N, M).
    """
    if exclude_self is None:
        exclude_self = key_labels is None
    key_labels = query_labels if key_labels is None else key_labels
    same = keras.ops.equal(keras.ops.expand_dims(query_labels, 1),
                           keras.ops.expand_dims(key_labels, 0))
    positive, negative = same, keras.ops.logical_not(same)
    if exclude_self:
        positive = primitives.set_diagonal(
            positive, keras.ops.zeros((keras.ops.shape(positive)[0],), dtype="bool"))
    return positive, negative


def in_xla_context():
    """True while TensorFlow traces a function compiled with `jit_compile=True`
    (`keras_dml.backend.primitives.in_xla_context`); False on JAX and PyTorch."""
    return primitives.in_xla_context()


def first_pair_per_class(labels, padded=False):
    """The first two samples, in batch order, of every class that has two or more.

    Args:
        labels: int tensor (N,).
        padded: return N // 2 slots (static shapes, for XLA), the C pairs first
            and then padding, instead of exactly C (a data-dependent shape). On JAX,
            whose steps are jitted, always padded.

    Returns:
        (anchors, positives, valid): int32 indices of each class's first and second
        sample, ordered by the anchor's position in the batch, and a bool mask of
        the slots that hold a pair.
    """
    if not padded and backend.is_tensorflow():
        return primitives.first_pairs(labels)
    n = keras.ops.shape(labels)[0]
    position = keras.ops.arange(n, dtype="int32")
    order = primitives.argsort_rows(keras.ops.expand_dims(labels, 0))[0]
    ordered = primitives.gather(labels, order)
    same_as_next = keras.ops.equal(ordered[1:], ordered[:-1])
    starts_class = keras.ops.concatenate(
        [keras.ops.ones((1,), "bool"), keras.ops.logical_not(same_as_next)], axis=0)
    has_second = keras.ops.concatenate([same_as_next, keras.ops.zeros((1,), "bool")], axis=0)
    is_anchor = keras.ops.logical_and(starts_class, has_second)
    # sorted positions of the anchors, by their batch index, then the padding
    slots = keras.ops.cast(keras.ops.argsort(keras.ops.where(is_anchor, order, n + position)),
                           "int32")[: n // 2]
    positives = primitives.gather(order, keras.ops.minimum(slots + 1, n - 1))
    anchors, valid = primitives.gather(order, slots), primitives.gather(is_anchor, slots)
    if padded or primitives.static_shapes():
        return anchors, positives, valid
    count = int(keras.ops.convert_to_numpy(keras.ops.sum(keras.ops.cast(valid, "int32"))))
    return anchors[:count], positives[:count], valid[:count]  # PyTorch: eager shapes


def masked_fill(x, mask, value):
    """`x` where `mask`, `value` elsewhere."""
    return keras.ops.where(mask, x, keras.ops.cast(value, x.dtype))


def own_entries(labels):
    """Indices (N, 2) of each row's label entry (i, labels[i]) of an (N, C) matrix."""
    return keras.ops.stack([keras.ops.arange(keras.ops.shape(labels)[0], dtype="int32"),
                            keras.ops.cast(labels, "int32")], axis=1)


def scaled_softmax(logits, labels, scale=1.0):
    """Per row, the cross entropy -log softmax(s logits)[label], with s = `scale`, and
    s softmax(s logits): the gradient w.r.t. `logits` before the label's -s.

    One max, one exp and one sum per row (the value's log-sum-exp and the softmax
    share them). Returns (value (N,), scaled probabilities (N, C), indices (N, 2) of
    each row's label entry).
    """
    top = keras.ops.max(logits, axis=1, keepdims=True)
    shifted = logits - top
    exponentials = keras.ops.exp(shifted if scale == 1.0 else scale * shifted)
    total = keras.ops.sum(exponentials, axis=1)
    value = keras.ops.log(total) - scale * primitives.take_along_rows(shifted, labels)
    return (value, exponentials * keras.ops.expand_dims(scale / total, 1),
            own_entries(labels))


def softmax_cross_entropy(logits, labels, scale=1.0):
    """Per row, -log softmax(s logits)[label] and its gradient w.r.t. `logits`,
    s (softmax(s logits) - onehot(label)), with s = `scale`."""
    value, probabilities, _ = scaled_softmax(logits, labels, scale)
    return value, primitives.subtract_at(probabilities, labels, scale)


def masked_max(x, mask, axis=-1, keepdims=False, empty_value=0.0):
    """Max of `x` over `mask`; rows with no masked-in entry give `empty_value`."""
    x = to_float32(x)
    result = keras.ops.max(masked_fill(x, mask, FLOAT32_MIN), axis=axis, keepdims=keepdims)
    has_any = keras.ops.any(mask, axis=axis, keepdims=keepdims)
    return keras.ops.where(has_any, result, keras.ops.full_like(result, empty_value))


def masked_min(x, mask, axis=-1, keepdims=False, empty_value=0.0):
    """Min of `x` over `mask`; rows with no masked-in entry give `empty_value`."""
    x = to_float32(x)
    result = keras.ops.min(masked_fill(x, mask, FLOAT32_MAX), axis=axis, keepdims=keepdims)
    has_any = keras.ops.any(mask, axis=axis, keepdims=keepdims)
    return keras.ops.where(has_any, result, keras.ops.full_like(result, empty_value))


def closest_below(candidates, threshold):
    """The semi-hard search (FaceNet), one positive per row: per row a, the column of
    the largest entry of `candidates` strictly below `threshold[a]`, and whether one is.

    `candidates` (N, M) float32 holds the negatives' similarities and `FLOAT32_MIN`
    elsewhere (`masked_fill(similarity, negative, FLOAT32_MIN)`, built once for all
    of a batch's positives); `threshold` (N, 1) is s_ap. Ties go to the first column.

    Returns:
        (chosen (N,) int32, found (N,) bool).
    """
    below = keras.ops.where(candidates < threshold, candidates, FLOAT32_MIN)
    chosen = keras.ops.cast(keras.ops.argmax(below, axis=1), "int32")
    return chosen, primitives.take_along_rows(below, chosen) > FLOAT32_MIN


def _shifted_exps(x, mask, axis, include_zero):
    """exp(x - shift) on the mask, their sum (plus exp(-shift) for the zero term), shift.

    Masked-out entries are filled with the lowest float, so their exps are exactly
    0 with no second select; an all-masked row has shift 0 and sum 0 (plus the
    zero term's 1).
    """
    filled = masked_fill(to_float32(x), mask, FLOAT32_MIN)
    shift = keras.ops.stop_gradient(  # initial: an empty batch has no max on TensorFlow
        keras.ops.max(filled, axis=axis, keepdims=True, initial=FLOAT32_MIN))
    shift = (keras.ops.maximum(shift, 0.0) if include_zero
             else keras.ops.where(shift > FLOAT32_MIN, shift, 0.0))
    exps = keras.ops.exp(filled - shift)
    total = keras.ops.sum(exps, axis=axis, keepdims=True)
    if include_zero:
        total += keras.ops.exp(-shift)
    return exps, total, shift


def masked_logsumexp(x, mask, axis=-1, keepdims=False, include_zero=False, empty_value=0.0):
    """log(sum(exp(x))) over `mask`, stable and finite for every row.

    Args:
        x: float tensor.
        mask: bool tensor of the same shape.
        include_zero: add a term exp(0) = 1 inside the sum, i.e. compute
            log(1 + sum(exp(x))), the soft-plus form of many DML losses. Such a row
            is never empty: an all-masked row gives exactly 0.
        empty_value: value of an all-masked row when `include_zero` is False.
            Defaults to 0.0 (the mathematical value, -inf, would poison sums).

    Returns:
        float32 tensor, `x` reduced over `axis`. Its gradient is the masked
        softmax, and exactly zero on masked-out entries and on empty rows.
    """
    _, total, shift = _shifted_exps(x, mask, axis, include_zero)
    result = _log_of_sum(total, shift, total > 0.0, empty_value)
    return result if keepdims else keras.ops.squeeze(result, axis=axis)


def masked_softmax(x, mask, axis=-1, include_zero=False):
    """Softmax of `x` over `mask` (zero elsewhere); the derivative of `masked_logsumexp`.

    With `include_zero`, the implicit exp(0) term takes part in the normalisation:
    entries are exp(x_j) / (1 + sum_k exp(x_k)). Empty rows are all zero.
    """
    exps, total, _ = _shifted_exps(x, mask, axis, include_zero)
    return exps / _softmax_divisor(total, total > 0.0)


def masked_logsumexp_and_softmax(x, mask, axis=-1, include_zero=False):
    """`masked_logsumexp` (keepdims=False, empty rows 0) and `masked_softmax` in one pass.

    Losses whose value is a log-sum-exp and whose pair weights are its softmax
    (multi-similarity, lifted structure, NCA, ...) need both; this shares the exps.
    """
    lse, softmax, _ = masked_softmax_parts(x, mask, axis, include_zero)
    return lse, softmax


def masked_softmax_parts(x, mask, axis=-1, include_zero=False, rows=None):
    """(log-sum-exp, softmax, non-empty) of `x` over `mask`, sharing one set of exps.

    Args:
        rows: optional bool tensor shaped like the reduction with keepdims (e.g.
            (N, 1)): rows outside it are treated as empty, at the cost of one
            small op instead of masking every entry.

    Returns:
        The log-sum-exp (reduced over `axis`, 0 for empty rows), the softmax (0 on
        masked-out entries and empty rows), and which rows are non-empty (keepdims).
    """
    exps, total, shift = _shifted_exps(x, mask, axis, include_zero)
    non_empty = total > 0.0
    if rows is not None:
        non_empty = keras.ops.logical_and(non_empty, rows)
    lse = _log_of_sum(total, shift, non_empty)
    return (keras.ops.squeeze(lse, axis=axis), exps / _softmax_divisor(total, non_empty),
            non_empty)


def logaddexp(a, b):
    """log(exp(a) + exp(b)) elementwise, stable; finite where both are float32.min."""
    high = keras.ops.maximum(a, b)
    high = keras.ops.where(keras.ops.isfinite(high), high, keras.ops.zeros_like(high))
    return high + keras.ops.log(keras.ops.exp(a - high) + keras.ops.exp(b - high))


def grouped_softplus_lse(x, groups, num_groups):
    """log(1 + sum_{i in g} exp(x_i)) for each group g, and each x_i's share of it.

    The per-group form of `masked_logsumexp(..., include_zero=True)` and its
    softmax for a one-hot mask (each x_i in exactly one group): O(N) work instead of O(N C).
    Empty groups give 0.

    Returns:
        (values (num_groups,), shares (N,) = exp(x_i) / (1 + sum_{j in g_i} exp(x_j))).
    """
    peak = keras.ops.segment_max(x, groups, num_segments=num_groups)  # empty: <= float32.min
    shift = keras.ops.stop_gradient(keras.ops.maximum(peak, 0.0))
    exps = keras.ops.exp(x - primitives.gather(shift, groups))
    total = (keras.ops.segment_sum(exps, groups, num_segments=num_groups)
             + keras.ops.exp(-shift))
    return keras.ops.log(total) + shift, exps / primitives.gather(total, groups)


def _log_of_sum(total, shift, non_empty, empty_value=0.0):
    """log(total) + shift on non-empty rows (a non-empty row's largest term is
    exp(0) = 1, so its total is >= 1), `empty_value` elsewhere."""
    safe_total = keras.ops.where(non_empty, total, keras.ops.ones_like(total))
    return keras.ops.where(non_empty, keras.ops.log(safe_total) + shift,
                           keras.ops.full_like(total, empty_value))


def _softmax_divisor(total, non_empty):
    """The row sums, infinite on empty rows: their exps (0, or kept ones of rows
    excluded by `rows`) divide to exactly 0, with no select over every entry."""
    return keras.ops.where(non_empty, total, float("inf"))


#: how far `safe_arccos` keeps its argument from +-1, where arccos' derivative is infinite
_ARCCOS_MARGIN = 1e-6


def safe_arccos(cosine):
    """arccos of `cosine` clipped to [-1 + 1e-6, 1 - 1e-6]: finite, with a finite
    gradient (0 beyond the clip) where `cosine` reaches +-1, as a self-pair's does."""
    return keras.ops.arccos(keras.ops.clip(cosine, -1.0 + _ARCCOS_MARGIN, 1.0 - _ARCCOS_MARGIN))
