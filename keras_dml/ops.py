"""Pure tensor functions shared by every loss, miner and metric.

Similarity matrices are always `query x key`: the key set may be the query batch
itself, a memory bank, the batch gathered from other replicas, or learnable proxies.
All reductions here are computed in float32, so they stay finite under
`mixed_float16` / `mixed_bfloat16` policies, and none of them casts to float64.
"""

import numpy as np
import tensorflow as tf

SIMILARITIES = ("cosine", "dot")
DISTANCES = ("euclidean", "squared_euclidean")
METRICS = SIMILARITIES + DISTANCES

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
    x = tf.convert_to_tensor(x)
    return x if x.dtype == tf.float32 else tf.cast(x, tf.float32)


NORM_EPSILON = 1e-12  # as tf.math.l2_normalize: a squared norm below it is held there


def l2_normalize(x, axis=-1, epsilon=NORM_EPSILON):
    """L2 normalisation that maps the zero vector to zero, not NaN.

    The values of `tf.math.l2_normalize` (the squared norm is held at `epsilon`
    from below), with the same gradient written out,
    g_x = (g - x (x . g) / |x|^2) / |x| (no radial part where the norm is held),
    in five elementwise passes instead of autodiff's longer chain.
    """

    @tf.custom_gradient
    def unit(x):
        scale, norm = inverse_norms(x, axis, epsilon, keepdims=True)

        def grad(upstream):
            return _through_normalisation(x, upstream, scale, norm, axis)

        return x * scale, grad

    return unit(tf.convert_to_tensor(x))


def unit_rows(x):
    """NumPy twin of `l2_normalize` over the rows of a 2-D array, same epsilon: rows
    with a squared norm below `NORM_EPSILON` are divided by its square root."""
    x = np.asarray(x)
    return x / np.sqrt(np.maximum(np.sum(np.square(x), axis=1, keepdims=True), NORM_EPSILON))


def inverse_norms(x, axis=-1, epsilon=NORM_EPSILON, keepdims=False):
    """1 / max(|x|, sqrt(epsilon)) along `axis`, and (max(|x|^2, epsilon), whether
    the norm is not held there): what the normalisation's gradient takes."""
    squared_norm = tf.reduce_sum(tf.square(x), axis=axis, keepdims=keepdims)
    held = tf.maximum(squared_norm, epsilon)
    return tf.math.rsqrt(held), (held, squared_norm >= epsilon)


def _radial(projection, held, unclipped):
    """The radial part of the normalisation's gradient, projection / |x|^2; 0 where
    the norm is held (a constant there)."""
    return tf.where(unclipped, projection / held, tf.zeros_like(projection))


def _through_normalisation(x, upstream, inverse, norm, axis=-1):
    """The gradient w.r.t. x of x / |x| given the `upstream` gradient of x / |x|:
    (g - x (x . g) / |x|^2) / |x|, with `inverse` and `norm` from `inverse_norms`
    (keepdims) and no radial part where the norm is held."""
    along = _radial(tf.reduce_sum(upstream * x, axis=axis, keepdims=True), *norm)
    return (upstream - x * along) * inverse


@tf.custom_gradient
def self_products(x):
    """x x^T, whose backward is one matmul, (G + G^T) x, instead of two."""

    def grad(upstream):
        return tf.matmul(upstream + tf.transpose(upstream), x)

    return tf.matmul(x, x, transpose_b=True), grad


def safe_sqrt(squared):
    """sqrt(max(squared, 0)), 0 with a zero (not infinite) gradient where squared is ~0."""
    positive = squared > _SQRT_EPSILON
    return tf.where(positive, tf.sqrt(tf.where(positive, squared, 1.0)), 0.0)


def cosine_between(query, key):
    """Cosine similarity (N, M) of query (N, d) to key (M, d).

    Both sides are normalised as (N, d) and (M, d) copies (`l2_normalize`) and
    multiplied, so no pass but the matmul touches an (N, M) matrix, forward or
    backward: each side's gradient is one matmul, then the normalisation's gradient
    on its rows.
    """
    return tf.matmul(l2_normalize(to_float32(query)), l2_normalize(to_float32(key)),
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
        weights: float32 (N, M), or a `tf.TensorArray` of its row blocks of
            `block_rows` rows each (the last may be shorter), read a block at a time
            and never concatenated (no second (N, M) copy).
        row_scale: float32 (N,), e.g. the upstream gradient of per-query values.
        metric: "cosine" or "dot".
        key_gradient: also the key's gradient (else zeros of its shape).
        block_rows: the rows of each block of a `tf.TensorArray` of weights.

    Returns:
        (query gradient (N, d), key gradient (M, d)).
    """
    if metric not in ("cosine", "dot"):
        raise ValueError(f"similarity_gradients takes metric 'cosine' or 'dot', got {metric!r}.")
    row_scale = row_scale[:, tf.newaxis]
    if metric == "cosine":
        inv_q, q_norm = inverse_norms(query, axis=1, keepdims=True)
        inv_k, k_norm = inverse_norms(key, axis=1, keepdims=True)
        query_in, key_in = query * inv_q, key * inv_k
    else:
        query_in, key_in = query, key
    if isinstance(weights, tf.TensorArray):
        to_query, to_key = _blocked_products(weights, block_rows, query_in, key_in, row_scale,
                                             key_gradient)
    else:
        to_query = tf.matmul(weights, key_in) * row_scale
        to_key = (tf.matmul(weights, query_in * row_scale, transpose_a=True) if key_gradient
                  else tf.zeros_like(key))
    if metric == "dot":
        return to_query, to_key
    return (_through_normalisation(query, to_query, inv_q, q_norm),
            _through_normalisation(key, to_key, inv_k, k_norm) if key_gradient else to_key)


def _blocked_products(blocks, block_rows, query, key, row_scale, key_gradient):
    """`(W @ key) * row_scale` and `W^T @ (query * row_scale)` from W's row blocks."""

    def step(i, to_query, to_key):
        start = i * block_rows
        block = blocks.read(i)
        scale = row_scale[start:start + block_rows]
        to_query = to_query.write(i, tf.matmul(block, key) * scale)
        if key_gradient:
            to_key += tf.reshape(tf.matmul(block, query[start:start + block_rows] * scale,
                                           transpose_a=True), tf.shape(to_key))
        return i + 1, to_query, to_key

    _, to_query, to_key = tf.while_loop(
        lambda i, *_: i < blocks.size(), step,
        (tf.constant(0), tf.TensorArray(query.dtype, size=blocks.size(), infer_shape=False),
         tf.zeros_like(key)), parallel_iterations=1)
    return tf.reshape(to_query.concat(), tf.shape(query)), to_key


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
    normalize = l2_normalize if metric == "cosine" else tf.identity
    query = normalize(to_float32(query))
    if key is None:
        key, products = query, self_products(query)
    else:
        key = to_float32(key)
        products = tf.matmul(query, key, transpose_b=True)
    if metric in SIMILARITIES:
        return products
    squared = (
        tf.reduce_sum(tf.square(query), axis=1, keepdims=True)
        - 2.0 * products
        + tf.reduce_sum(tf.square(key), axis=1)[tf.newaxis, :]
    )
    squared = tf.maximum(squared, 0.0)
    return squared if metric == "squared_euclidean" else safe_sqrt(squared)


def similarities_between_rows(x, rows, columns, metric="cosine"):
    """S[i, j] = sim(x[rows[i]], x[columns[j]]), with a dense gradient w.r.t. x.

    The values of `pairwise(tf.gather(x, rows), tf.gather(x, columns), metric)`,
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

    @tf.custom_gradient
    def similarities(x):
        query, key = tf.gather(x, rows), tf.gather(x, columns)
        products = tf.matmul(query, key, transpose_b=True)
        if not cosine:
            return products, lambda upstream: _scatter_rows_gradient(
                tf.shape(x), rows, tf.matmul(upstream, key),
                columns, tf.matmul(upstream, query, transpose_a=True))
        # M = diag(s) Q K^T diag(t) with s, t the inverse norms. Its gradient is
        # worked out on the R x K matrix, so that each (R, d) block is touched once:
        #   dQ = (G * s t^T) K - diag(s^2 rowsum(G * M)) Q, and likewise dK.
        query_scale, query_norm = inverse_norms(query, axis=1)
        key_scale, key_norm = inverse_norms(key, axis=1)
        scales = query_scale[:, tf.newaxis] * key_scale[tf.newaxis, :]
        matrix = products * scales

        def grad(upstream):
            weighted, along = upstream * scales, upstream * matrix
            query_radial = _radial(tf.reduce_sum(along, axis=1), *query_norm)
            key_radial = _radial(tf.reduce_sum(along, axis=0), *key_norm)
            query_grad = tf.matmul(weighted, key) - query * query_radial[:, tf.newaxis]
            key_grad = (tf.matmul(weighted, query, transpose_a=True)
                        - key * key_radial[:, tf.newaxis])
            return _scatter_rows_gradient(tf.shape(x), rows, query_grad, columns, key_grad)

        return matrix, grad

    return similarities(to_float32(x))


def _scatter_rows_gradient(shape, rows, row_grad, columns, column_grad):
    """The dense gradient of x from the gradients of x[rows] and x[columns]: two
    scatters (concatenating the blocks first costs more); repeated indices add up."""
    return (tf.scatter_nd(rows[:, tf.newaxis], row_grad, shape)
            + tf.scatter_nd(columns[:, tf.newaxis], column_grad, shape))


def cond(predicate, if_true, if_false):
    """`tf.cond` for a boolean tensor; for a Python bool (a choice made from static
    shapes) only the chosen branch is built."""
    if isinstance(predicate, bool):
        return if_true() if predicate else if_false()
    return tf.cond(predicate, if_true, if_false)


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
    same = tf.equal(query_labels[:, tf.newaxis], key_labels[tf.newaxis, :])
    positive, negative = same, tf.logical_not(same)
    if exclude_self:  # one pass over the diagonal, not an N x N eye and a logical_and
        diagonal = tf.zeros_like(tf.linalg.diag_part(same))
        positive = tf.linalg.set_diag(positive, diagonal)
    return positive, negative


def in_xla_context():
    """True while tracing a function compiled with `jit_compile=True`.

    XLA computes dynamically shaped tensors at their upper bound, and slowly;
    code that can shrink a tensor to a data-dependent size asks this first.
    """
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved: assume XLA
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def first_pair_per_class(labels, padded=False):
    """The first two samples, in batch order, of every class that has two or more.

    Args:
        labels: int tensor (N,).
        padded: return N // 2 slots (static shapes, for XLA), the C pairs first
            and then padding, instead of exactly C (a data-dependent shape).

    Returns:
        (anchors, positives, valid): int32 indices of each class's first and second
        sample, ordered by the anchor's position in the batch, and a bool mask of
        the slots that hold a pair.
    """
    if not padded:
        return _first_pairs(labels)
    n = tf.shape(labels)[0]
    order = tf.cast(tf.argsort(labels, stable=True), tf.int32)
    ordered = tf.gather(labels, order)
    starts_class = tf.concat([[True], tf.not_equal(ordered[1:], ordered[:-1])], axis=0)
    has_second = tf.concat([tf.equal(ordered[1:], ordered[:-1]), [False]], axis=0)
    is_anchor = tf.logical_and(starts_class, has_second)[:n]
    # sorted positions of the anchors, by their batch index, then the padding
    slots = tf.argsort(tf.where(is_anchor, order, n + tf.range(n)))[: n // 2]
    positives = tf.gather(order, tf.minimum(slots + 1, n - 1))
    return tf.gather(order, slots), positives, tf.gather(is_anchor, slots)


def _first_pairs(labels):
    """`first_pair_per_class` with exactly C pairs: classes in order of first appearance."""
    n = tf.shape(labels)[0]
    distinct, class_of = tf.unique(labels, out_idx=tf.int32)
    classes = tf.shape(distinct)[0]
    position = tf.range(n)
    first = tf.math.unsorted_segment_min(position, class_of, classes)
    is_first = tf.equal(position, tf.gather(first, class_of))
    second = tf.math.unsorted_segment_min(tf.where(is_first, n, position), class_of, classes)
    with_pair = tf.where(second < n)[:, 0]  # n: the class has no second sample
    anchors, positives = tf.gather(first, with_pair), tf.gather(second, with_pair)
    return anchors, positives, tf.ones_like(anchors, dtype=tf.bool)


def masked_fill(x, mask, value):
    """`x` where `mask`, `value` elsewhere."""
    return tf.where(mask, x, tf.constant(value, x.dtype))


def own_entries(labels):
    """Indices (N, 2) of each row's label entry (i, labels[i]) of an (N, C) matrix."""
    return tf.stack([tf.range(tf.shape(labels)[0]), labels], axis=1)


def scaled_softmax(logits, labels, scale=1.0):
    """Per row, the cross entropy -log softmax(s logits)[label], with s = `scale`, and
    s softmax(s logits): the gradient w.r.t. `logits` before the label's -s.

    One max, one exp and one sum per row (the value's log-sum-exp and the softmax
    share them). Returns (value (N,), scaled probabilities (N, C), indices (N, 2) of
    each row's label entry).
    """
    own = own_entries(labels)
    top = tf.reduce_max(logits, axis=1, keepdims=True)
    shifted = logits - top
    exponentials = tf.exp(shifted if scale == 1.0 else scale * shifted)
    total = tf.reduce_sum(exponentials, axis=1)
    value = tf.math.log(total) - scale * tf.gather_nd(shifted, own)
    return value, exponentials * (scale / total)[:, tf.newaxis], own


def softmax_cross_entropy(logits, labels, scale=1.0):
    """Per row, -log softmax(s logits)[label] and its gradient w.r.t. `logits`,
    s (softmax(s logits) - onehot(label)), with s = `scale`."""
    value, probabilities, own = scaled_softmax(logits, labels, scale)
    return value, tf.tensor_scatter_nd_sub(
        probabilities, own, tf.fill(tf.shape(labels), tf.cast(scale, tf.float32)))


def masked_max(x, mask, axis=-1, keepdims=False, empty_value=0.0):
    """Max of `x` over `mask`; rows with no masked-in entry give `empty_value`."""
    x = to_float32(x)
    lowest = tf.float32.min
    result = tf.reduce_max(masked_fill(x, mask, lowest), axis=axis, keepdims=keepdims)
    has_any = tf.reduce_any(mask, axis=axis, keepdims=keepdims)
    return tf.where(has_any, result, tf.fill(tf.shape(result), empty_value))


def masked_min(x, mask, axis=-1, keepdims=False, empty_value=0.0):
    """Min of `x` over `mask`; rows with no masked-in entry give `empty_value`."""
    x = to_float32(x)
    result = tf.reduce_min(masked_fill(x, mask, tf.float32.max), axis=axis, keepdims=keepdims)
    has_any = tf.reduce_any(mask, axis=axis, keepdims=keepdims)
    return tf.where(has_any, result, tf.fill(tf.shape(result), empty_value))


def closest_below(candidates, threshold):
    """The semi-hard search (FaceNet), one positive per row: per row a, the column of
    the largest entry of `candidates` strictly below `threshold[a]`, and whether one is.

    `candidates` (N, M) float32 holds the negatives' similarities and float32.min
    elsewhere (`masked_fill(similarity, negative, tf.float32.min)`, built once for all
    of a batch's positives); `threshold` (N, 1) is s_ap. Ties go to the first column.

    Returns:
        (chosen (N,) int32, found (N,) bool).
    """
    lowest = tf.float32.min
    below = tf.where(candidates < threshold, candidates, lowest)
    chosen = tf.argmax(below, axis=1, output_type=tf.int32)
    return chosen, tf.gather(below, chosen, batch_dims=1) > lowest


def _shifted_exps(x, mask, axis, include_zero):
    """exp(x - shift) on the mask, their sum (plus exp(-shift) for the zero term), shift.

    Masked-out entries are filled with the lowest float, so their exps are exactly
    0 with no second select; an all-masked row has shift 0 and sum 0 (plus the
    zero term's 1).
    """
    lowest = tf.float32.min
    filled = masked_fill(to_float32(x), mask, lowest)
    shift = tf.stop_gradient(tf.reduce_max(filled, axis=axis, keepdims=True))
    shift = tf.maximum(shift, 0.0) if include_zero else tf.where(shift > lowest, shift, 0.0)
    exps = tf.exp(filled - shift)
    total = tf.reduce_sum(exps, axis=axis, keepdims=True)
    if include_zero:
        total += tf.exp(-shift)
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
    return result if keepdims else tf.squeeze(result, axis=axis)


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
        non_empty = tf.logical_and(non_empty, rows)
    lse = _log_of_sum(total, shift, non_empty)
    return tf.squeeze(lse, axis=axis), exps / _softmax_divisor(total, non_empty), non_empty


def logaddexp(a, b):
    """log(exp(a) + exp(b)) elementwise, stable; finite where both are float32.min."""
    high = tf.maximum(a, b)
    high = tf.where(tf.math.is_finite(high), high, tf.zeros_like(high))
    return high + tf.math.log(tf.exp(a - high) + tf.exp(b - high))


def grouped_softplus_lse(x, groups, num_groups):
    """log(1 + sum_{i in g} exp(x_i)) for each group g, and each x_i's share of it.

    The per-group form of `masked_logsumexp(..., include_zero=True)` and its
    softmax for a one-hot mask (each x_i in exactly one group): O(N) work instead of O(N C).
    Empty groups give 0.

    Returns:
        (values (num_groups,), shares (N,) = exp(x_i) / (1 + sum_{j in g_i} exp(x_j))).
    """
    peak = tf.math.unsorted_segment_max(x, groups, num_groups)  # empty: float32.min
    shift = tf.stop_gradient(tf.maximum(peak, 0.0))
    exps = tf.exp(x - tf.gather(shift, groups))
    total = tf.math.unsorted_segment_sum(exps, groups, num_groups) + tf.exp(-shift)
    return tf.math.log(total) + shift, exps / tf.gather(total, groups)


def _log_of_sum(total, shift, non_empty, empty_value=0.0):
    """log(total) + shift on non-empty rows (a non-empty row's largest term is
    exp(0) = 1, so its total is >= 1), `empty_value` elsewhere."""
    safe_total = tf.where(non_empty, total, tf.ones_like(total))
    return tf.where(non_empty, tf.math.log(safe_total) + shift,
                    tf.fill(tf.shape(total), empty_value))


def _softmax_divisor(total, non_empty):
    """The row sums, infinite on empty rows: their exps (0, or kept ones of rows
    excluded by `rows`) divide to exactly 0, with no select over every entry."""
    return tf.where(non_empty, total, float("inf"))
