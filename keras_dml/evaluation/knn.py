"""Exact k-nearest-neighbour search in chunks, in memory bounded by chunk x N."""

import numpy as np
import tensorflow as tf

from keras_dml.evaluation import _inputs

_SCORE_BUDGET = 2**26  # float32 scores held per chunk: 256 MB


def _prepare(embeddings, distance):
    """Embeddings and per-reference bias so that score = q . r + bias ranks neighbours."""
    x = tf.constant(embeddings)
    if distance == "cosine":
        return tf.math.l2_normalize(x, axis=1), None
    if distance == "euclidean":
        # -|q - r|^2 = 2 q.r - |r|^2 - |q|^2; the last term does not change a query's ranking.
        return x, -tf.reduce_sum(tf.square(x), axis=1)
    return x, None


@tf.function(reduce_retracing=True)
def _chunk_knn(queries, references, bias, self_offset, k, scale):
    scores = tf.matmul(queries, references, transpose_b=True) * scale
    if bias is not None:
        scores = scores + bias[tf.newaxis, :]
    if self_offset is not None:
        rows = tf.range(tf.shape(queries)[0])
        cols = tf.minimum(rows + self_offset, tf.shape(references)[0] - 1)
        scores = tf.tensor_scatter_nd_update(
            scores,
            tf.stack([rows, cols], axis=1),
            tf.fill(tf.shape(rows), tf.constant(-np.inf, scores.dtype)),
        )
    return tf.math.top_k(scores, k=k, sorted=True)


def iter_nearest_neighbors(
    queries, references=None, k=1, distance="cosine", chunk_size=None
):
    """Yield `(start, indices, scores)` for consecutive chunks of queries.

    See `nearest_neighbors`; this generator keeps only one chunk of results alive.
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
    available = references.shape[0] - int(leave_one_out)
    if k > available:
        raise ValueError(
            f"k={k} exceeds the {available} references available to each query"
            + (" (leave-one-out excludes the query itself)." if leave_one_out else ".")
        )
    num_queries = queries.shape[0]
    if chunk_size is None:
        chunk_size = max(1, min(num_queries, _SCORE_BUDGET // references.shape[0]))
    chunk_size = _inputs.check_positive_int(chunk_size, "chunk_size")

    ref, bias = _prepare(references, distance)
    qry = ref if leave_one_out else _prepare(queries, distance)[0]
    scale = 2.0 if distance == "euclidean" else 1.0
    for start in range(0, num_queries, chunk_size):
        chunk = qry[start : start + chunk_size]
        offset = tf.constant(start, tf.int32) if leave_one_out else None
        scores, indices = _chunk_knn(chunk, ref, bias, offset, k, scale)
        yield start, indices.numpy(), scores.numpy()


def nearest_neighbors(queries, references=None, k=1, distance="cosine", chunk_size=None):
    """Exact k nearest references of every query, computed chunk by chunk.

    Scores are computed on the default TensorFlow device (the GPU when there is
    one) for `chunk_size` queries at a time against all references, so memory is
    bounded by chunk_size x num_references, never queries x references.

    Ties are broken deterministically: among references with bitwise-equal
    scores, the one with the lower index comes first.

    Args:
        queries: float array (Q, d), NumPy or tensor.
        references: float array (N, d). Defaults to None: the queries themselves,
            leave-one-out (each query's own row is excluded by index, so exact
            duplicates of a query are still found).
        k: number of neighbours per query. Defaults to 1.
        distance: "cosine", "dot" (inner product) or "euclidean". Defaults to
            "cosine".
        chunk_size: queries per chunk. Defaults to None: about 2**26 / N
            (a 256 MB score buffer).

    Returns:
        `(indices, scores)`: int32 (Q, k) reference indices, nearest first, and
        float32 (Q, k) similarities (cosine or inner product; for "euclidean",
        minus the squared distance).

    Examples:
        >>> x = np.eye(3, dtype="float32")
        >>> nearest_neighbors(x, k=2)[0].shape
        (3, 2)
    """
    indices, scores = [], []
    q = _inputs.as_embeddings(queries, "queries")
    for _, idx, sc in iter_nearest_neighbors(q, references, k, distance, chunk_size):
        indices.append(idx)
        scores.append(sc)
    scores = np.concatenate(scores)
    if distance == "euclidean":
        scores = scores - np.sum(np.square(q), axis=1, keepdims=True)
    return np.concatenate(indices), scores
