"""Exact k-nearest-neighbour search in chunks, in memory bounded by chunk x N.

How it is fast on a CPU and exact:

* Scores are one matmul per chunk of queries on the default TensorFlow device
  (the GPU when there is one). Norms are computed once: cosine normalises the
  embeddings up front; the Euclidean score `-|q - r|^2` and the -inf of padding
  columns ride in one or two extra embedding columns, so the matmul yields final
  scores and no elementwise pass follows it.
* Top-k in two stages: a row of N scores is cut into groups of b; the k groups
  with the largest maxima are kept (top-k over N/b maxima), and the final top-k
  runs on their k*b members. This is exact: a member of the true top-k lives in
  a group whose maximum is at least its score, and only k-1 other groups can beat
  that maximum. With b ~ sqrt(N/k) it sorts about 2 sqrt(N k) values instead of N.
* Leave-one-out (references = queries) uses the symmetry of the score matrix:
  panel i scores rows i against columns >= i only, and its transpose feeds the
  later rows' candidate lists (merged chunk by chunk), halving the matmul.

Ties: among bitwise-equal scores the reference with the lower index wins. The
two-stage selection, the merges and `tf.math.top_k` all keep that order.
"""

import math

import numpy as np
import tensorflow as tf

from keras_dml.evaluation import _inputs

_SCORE_BUDGET = 2**26  # float32 scores in one chunk: 256 MB
_STATE_BUDGET = 2**27  # bytes of running candidate lists in the symmetric search
_NEG = float(-np.finfo(np.float32).max)  # score of padding and of the query itself


def _group_size(width, k):
    """Group size b of the two-stage top-k; 1 means a plain top-k."""
    b = int(math.sqrt(width / k)) if k > 0 else 1
    return b if b >= 2 and width // b >= k else 1


def _top_k(scores, k, group):
    """Exact top-k of each row, ties to the lower column; pads rows narrower than k."""
    if group == 1:
        missing = tf.maximum(k - tf.shape(scores)[1], 0)
        scores = tf.pad(scores, [[0, 0], [0, missing]], constant_values=_NEG)
        return tf.math.top_k(scores, k=k, sorted=True)
    rows, width = tf.shape(scores)[0], tf.shape(scores)[1]
    groups = tf.reshape(scores, [rows, width // group, group])
    maxima, chosen = tf.math.top_k(tf.reduce_max(groups, axis=2), k=k, sorted=True)
    chosen = tf.sort(chosen, axis=1)  # ascending, so ties keep column order
    members = tf.reshape(tf.gather(groups, chosen, batch_dims=1), [rows, k * group])
    # The k chosen maxima are k scores >= the k-th of them, so every top-k score is
    # too: members below it can go, which spares the heap most insertions.
    floor = maxima[:, k - 1 :]
    members = tf.where(members >= floor, members, tf.constant(-np.inf, members.dtype))
    values, position = tf.math.top_k(members, k=k, sorted=True)
    group_of = tf.gather(chosen, position // group, batch_dims=1)
    return values, group_of * group + position % group


def _merge(values_a, indices_a, values_b, indices_b, k):
    """Top-k of two candidate lists; on ties list a (lower indices) wins."""
    values, position = tf.math.top_k(tf.concat([values_a, values_b], 1), k=k, sorted=True)
    return values, tf.gather(tf.concat([indices_a, indices_b], 1), position, batch_dims=1)


def _exclude_diagonal(scores):
    rows = tf.range(tf.shape(scores)[0])
    return tf.tensor_scatter_nd_update(
        scores, tf.stack([rows, rows], 1), tf.fill(tf.shape(rows), tf.constant(_NEG))
    )


@tf.function(reduce_retracing=True)
def _chunk(queries, references, offset, k, group, leave_one_out):
    """Queries (t, d') against all references (n', d'): exact top-k."""
    scores = tf.matmul(queries, references, transpose_b=True)
    if leave_one_out:  # the query's own column is `offset + row`
        rows = tf.range(tf.shape(scores)[0])
        scores = tf.tensor_scatter_nd_update(
            scores, tf.stack([rows, rows + offset], 1), tf.fill(tf.shape(rows), _NEG)
        )
    return _top_k(scores, k, group)


@tf.function(reduce_retracing=True)
def _panel(queries, references, offset, state_values, state_indices, k, row_group, col_group):
    """Symmetric step: rows of this panel vs columns >= offset, and the transpose."""
    scores = _exclude_diagonal(tf.matmul(queries, references, transpose_b=True))
    rows = tf.shape(queries)[0]
    values, indices = _top_k(scores, k, row_group)
    values, indices = _merge(
        state_values[:rows], state_indices[:rows], values, indices + offset, k
    )
    later = tf.transpose(scores)[rows:]  # later rows' scores against this panel
    later_values, later_indices = _top_k(later, k, col_group)
    later_values, later_indices = _merge(
        state_values[rows:], state_indices[rows:], later_values, later_indices + offset, k
    )
    return values, indices, later_values, later_indices


def _augment(x, distance, padded_rows, query_side):
    """Embeddings with extra columns so that `query_row . reference_row` is the score.

    cosine/dot: query [x, 1], reference [x, bias]; euclidean: query
    [2x, 1, -|x|^2], reference [x, -|x|^2 + bias, 1], which gives -|q - r|^2.
    `bias` is 0 on real rows and a huge negative on padding rows.
    """
    n, d = x.shape
    if distance == "cosine":
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    extra = 2 if distance == "euclidean" else 1
    out = np.zeros((n + padded_rows, d + extra), np.float32)
    bias = np.zeros(n + padded_rows, np.float32)
    bias[n:] = _NEG
    if distance == "euclidean":
        squared = np.zeros(n + padded_rows, np.float32)
        squared[:n] = np.einsum("ij,ij->i", x, x)
        if query_side:
            out[:n, :d] = 2.0 * x
            out[:, d], out[:, d + 1] = 1.0, -squared
        else:
            out[:n, :d] = x
            out[:, d], out[:, d + 1] = bias - squared, 1.0
    else:
        out[:n, :d] = x
        out[:, d] = 1.0 if query_side else bias
    return tf.constant(out)


def _padding(n, group):
    return (-n) % group


def _search_rows(queries, references, k, distance, chunk_size, leave_one_out):
    """Chunks of queries against all references (each row sees every column)."""
    n = references.shape[0]
    group = _group_size(n, k)
    pad = _padding(n, group)
    ref = _augment(references, distance, pad, query_side=False)
    qry = _augment(queries, distance, 0, query_side=True)
    for start in range(0, queries.shape[0], chunk_size):
        values, indices = _chunk(
            qry[start : start + chunk_size], ref, tf.constant(start), k, group, leave_one_out
        )
        yield start, indices, values


def _search_symmetric(x, k, distance, chunk_size, group):
    """Leave-one-out over x using the symmetric score matrix (half the matmul)."""
    n = x.shape[0]
    pad = _padding(n, group)
    chunk_size = max(group, chunk_size - chunk_size % group)
    qry = _augment(x, distance, pad, query_side=True)
    ref = _augment(x, distance, pad, query_side=False)
    total = n + pad
    state_values = tf.fill([total, k], tf.constant(-np.inf, tf.float32))
    state_indices = tf.zeros([total, k], tf.int32)
    for start in range(0, n, chunk_size):
        rows = min(chunk_size, total - start)
        values, indices, state_values, state_indices = _panel(
            qry[start : start + rows],
            ref[start:],
            tf.constant(start),
            state_values,
            state_indices,
            k,
            group if (total - start) // group >= k else 1,
            group if rows // group >= k else 1,
        )
        keep = min(rows, n - start)
        yield start, indices[:keep], values[:keep]


def iter_nearest_neighbors(queries, references=None, k=1, distance="cosine", chunk_size=None):
    """Yield `(start, indices, scores)` for consecutive chunks of queries.

    Same arguments and results as `nearest_neighbors`, but only one chunk of
    results is alive at a time; `indices` and `scores` are tensors of the chunk
    of queries starting at row `start`.
    """
    distance = _inputs.check_distance(distance)
    k = _inputs.check_positive_int(k, "k")
    queries = _inputs.as_embeddings(queries, "queries")
    leave_one_out = references is None
    references = queries if leave_one_out else _inputs.as_embeddings(references, "references")
    if references.shape[1] != queries.shape[1]:
        raise ValueError(
            f"queries have dimension {queries.shape[1]} but references have dimension "
            f"{references.shape[1]}."
        )
    n = references.shape[0]
    available = n - int(leave_one_out)
    if k > available:
        raise ValueError(
            f"k={k} exceeds the {available} references available to each query"
            + (" (leave-one-out excludes the query itself)." if leave_one_out else ".")
        )
    if chunk_size is None:
        chunk_size = max(1, _SCORE_BUDGET // n)
    chunk_size = _inputs.check_positive_int(chunk_size, "chunk_size")

    group = _group_size(n, k)
    symmetric = (
        leave_one_out
        and group > 1
        and min(chunk_size, n) // group >= k  # the transposed panel is two-staged too
        and 3 * n * k * 8 <= _STATE_BUDGET
    )
    if symmetric:
        yield from _search_symmetric(queries, k, distance, chunk_size, group)
    else:
        yield from _search_rows(queries, references, k, distance, chunk_size, leave_one_out)


def nearest_neighbors(queries, references=None, k=1, distance="cosine", chunk_size=None):
    """Exact k nearest references of every query, computed chunk by chunk.

    Scores are computed on the default TensorFlow device (the GPU when there is
    one), `chunk_size` queries at a time, so memory is bounded by
    chunk_size x num_references, never queries x references. Among references
    with bitwise-equal scores, the one with the lower index comes first.

    Args:
        queries: float array (Q, d), NumPy or tensor.
        references: float array (N, d). Defaults to None: the queries themselves,
            leave-one-out (each query's own row is excluded by index, so exact
            duplicates of a query are still found).
        k: number of neighbours per query. Defaults to 1.
        distance: "cosine", "dot" (inner product) or "euclidean". Defaults to
            "cosine".
        chunk_size: queries per chunk. Defaults to None: 2**26 / N (a 256 MB
            score buffer).

    Returns:
        `(indices, scores)`: int32 (Q, k) reference indices, nearest first, and
        float32 (Q, k) scores: cosine similarity, inner product, or for
        "euclidean" minus the squared distance.

    Examples:
        >>> nearest_neighbors(np.eye(3, dtype="float32"), k=2)[0]
        array([[1, 2], [0, 2], [0, 1]], dtype=int32)
    """
    indices, scores = [], []
    for _, idx, sc in iter_nearest_neighbors(queries, references, k, distance, chunk_size):
        indices.append(idx.numpy())
        scores.append(sc.numpy())
    return np.concatenate(indices), np.concatenate(scores)
