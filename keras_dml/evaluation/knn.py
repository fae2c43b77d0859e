"""Exact k-nearest-neighbour search in chunks, in memory bounded by chunk x N.

How it is fast on a CPU and still exact:

* Scores are one matmul per chunk of queries on the default TensorFlow device
  (the GPU when there is one). Norms are computed once: cosine normalises the
  embeddings up front; the Euclidean score `-|q - r|^2` and the -inf of padding
  columns ride in one or two extra embedding columns, so the matmul yields final
  scores and no elementwise pass follows it.
* Top-k in two stages: the references are cut into blocks of b consecutive
  indices; the k blocks with the largest maxima are kept (a top-k over N/b
  maxima) and the final top-k runs on their k*b members. This is exact: a member
  of the true top-k lies in a block whose maximum is at least its score, and
  fewer than k other blocks can beat that maximum (ties go to the lower block,
  which holds the lower indices). Members below the k-th kept maximum cannot
  make the top-k and are dropped before it. With b ~ sqrt(N/k) this sorts about
  2 sqrt(N k) values per query instead of N.
* The reference rows are stored permuted, so that block g is the strided column
  set {g, g + N/b, g + 2N/b, ...} of the score matrix: the block maxima are then
  an elementwise maximum of b contiguous slices (vectorised), not a reduction
  over short rows.

Ties: among bitwise-equal scores the reference with the lower index wins.

Kernels: where faiss is installed and TensorFlow sees no GPU, the search runs
in faiss' flat index instead (`kernel="auto"`, see `keras_dml.evaluation.knn_faiss`),
in the same order; `kernel="tensorflow"` or `kernel="faiss"` forces one.
"""

import math

import numpy as np
import tensorflow as tf

from keras_dml import hyperparameters, ops, validation
from keras_dml.evaluation.knn_faiss import FlatIndex, resolve_kernel

_SCORE_BUDGET = 2**25  # float32 scores in one chunk: 128 MB
_MIN_CHUNK_ROWS = 1024  # fewer rows a chunk waste the matmul (a thin operand reread per chunk)
_MAX_SCORE_BUDGET = 2**27  # how far the buffer grows (512 MB) to keep _MIN_CHUNK_ROWS
_NEG = float(-np.finfo(np.float32).max)  # score of padding and of the query itself
_FAISS_CHUNK_ROWS = 2**16  # queries per faiss call: results of (k + 8) x 12 bytes each


def _group_size(width, k):
    """Block size b of the two-stage top-k; 1 means a plain top-k."""
    b = int(math.sqrt(width / k))
    return b if b >= 2 and width // b >= k else 1


def _block_order(total, group):
    """Original reference index at each stored position: position j*G + g holds g*b + j."""
    return np.arange(total).reshape(total // group, group).T.reshape(-1)


def _stored_position(index, total, group):
    """Inverse of `_block_order`."""
    return (index % group) * (total // group) + index // group


def _top_k(scores, k, group):
    """Exact top-k of each row of `scores` (columns in `_block_order`), ties to the lower index.

    `k` and `group` are int32 scalar tensors. Returns values and original
    reference indices.
    """
    rows, blocks = tf.shape(scores)[0], tf.shape(scores)[1] // group
    block_max = tf.reduce_max(tf.reshape(scores, [rows, group, blocks]), axis=1)
    maxima, chosen = tf.math.top_k(block_max, k=k, sorted=True)
    chosen = tf.sort(chosen, axis=1)  # ascending blocks: members in index order
    positions = tf.range(group)[tf.newaxis, tf.newaxis, :] * blocks + chosen[:, :, tf.newaxis]
    members = tf.gather(scores, tf.reshape(positions, [rows, k * group]), batch_dims=1)
    # The k kept maxima are k scores >= the k-th of them, so the top-k are too.
    members = tf.where(members >= maxima[:, k - 1 :], members, tf.constant(-np.inf))
    values, slot = tf.math.top_k(members, k=k, sorted=True)
    return values, tf.gather(chosen, slot // group, batch_dims=1) * group + slot % group


@tf.function(input_signature=[
    tf.TensorSpec([None, None], tf.float32),  # queries
    tf.TensorSpec([None, None], tf.float32),  # references
    tf.TensorSpec([None], tf.int32),  # own columns (leave-one-out), else empty
    tf.TensorSpec([], tf.int32),  # k
    tf.TensorSpec([], tf.int32),  # group
])
def _chunk(queries, references, own_columns, k, group):
    """Queries (t, d') against all stored references (n', d'): exact top-k.

    Traced once: shapes, k, the block size and leave-one-out are all tensors, so
    a series of query batch sizes, k's or galleries never retraces it.
    """
    scores = tf.matmul(queries, references, transpose_b=True)
    rows = tf.range(tf.shape(scores)[0])

    def leave_own_out():  # the query's own column scores lowest
        return tf.tensor_scatter_nd_update(
            scores, tf.stack([rows, own_columns], 1), tf.fill(tf.shape(rows), _NEG))

    scores = tf.cond(tf.size(own_columns) > 0, leave_own_out, lambda: scores)
    return tf.cond(group > 1, lambda: _top_k(scores, k, group),
                   lambda: tuple(tf.math.top_k(scores, k=k, sorted=True)))


def _augment(x, metric, padded_rows, query_side):
    """Embeddings with extra columns so that `query_row . reference_row` is the score.

    cosine/dot: query [x, 1], reference [x, bias]; euclidean: query
    [2x, 1, -|x|^2], reference [x, -|x|^2 + bias, 1], which gives -|q - r|^2.
    `bias` is 0 on real rows and a huge negative on padding rows.
    """
    n, d = x.shape
    if metric == "cosine":
        x = ops.unit_rows(x)
    extra = 2 if metric == "euclidean" else 1
    out = np.zeros((n + padded_rows, d + extra), np.float32)
    bias = np.zeros(n + padded_rows, np.float32)
    bias[n:] = _NEG
    if metric == "euclidean":
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
    return out


def _search(queries, references, k, metric, chunk_size, leave_one_out):
    """Yield (start, indices, scores) for chunks of queries against all references."""
    n = references.shape[0]
    group = _group_size(n, k)
    total = n + (-n) % group
    stored = _augment(references, metric, total - n, query_side=False)
    ref = tf.constant(stored[_block_order(total, group)])
    qry = tf.constant(_augment(queries, metric, 0, query_side=True))
    own = _stored_position(np.arange(n), total, group) if leave_one_out else np.zeros(0)
    own = tf.constant(own.astype(np.int32))
    for start in range(0, queries.shape[0], chunk_size):
        stop = start + chunk_size
        values, indices = _chunk(qry[start:stop], ref, own[start:stop] if leave_one_out else own,
                                 tf.constant(k), tf.constant(group))
        yield start, indices, values


def _faiss_search(queries, references, k, metric, chunk_size, leave_one_out):
    """`_search` through faiss' flat index (`knn_faiss.FlatIndex`), same order."""
    index = FlatIndex(references, metric)
    for start in range(0, queries.shape[0], chunk_size):
        stop = min(start + chunk_size, queries.shape[0])
        own = np.arange(start, stop) if leave_one_out else None
        indices, values = index.search(queries[start:stop], k, own)
        yield start, tf.constant(indices.astype(np.int32)), tf.constant(values)


def _default_chunk_size(num_references):
    """Queries per chunk: a 128 MB score buffer, grown up to 512 MB for 1,024 queries."""
    grown = min(_MIN_CHUNK_ROWS, _MAX_SCORE_BUDGET // num_references)
    return max(1, _SCORE_BUDGET // num_references, grown)


@hyperparameters.renamed_keywords(distance="metric")
def iter_nearest_neighbors(queries, references=None, k=1, metric="cosine", chunk_size=None,
                           kernel="auto"):
    """Yield `(start, indices, scores)` for consecutive chunks of queries.

    Same arguments and results as `nearest_neighbors`, but only one chunk of
    results is alive at a time; `indices` and `scores` are tensors of the chunk
    of queries starting at row `start`.
    """
    kernel = resolve_kernel(kernel)
    metric = validation.check_search_metric(metric)
    k = hyperparameters.integer_at_least("k", k, 1)
    queries = validation.embedding_array(queries, "queries")
    leave_one_out = references is None
    references = queries if leave_one_out else validation.embedding_array(references, "references")
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
    if chunk_size is None:  # faiss bounds its score memory itself, and slows down on small calls
        chunk_size = _FAISS_CHUNK_ROWS if kernel == "faiss" else _default_chunk_size(n)
    chunk_size = hyperparameters.integer_at_least("chunk_size", chunk_size, 1)

    search = _faiss_search if kernel == "faiss" else _search
    yield from search(queries, references, k, metric, chunk_size, leave_one_out)


@hyperparameters.renamed_keywords(distance="metric")
def nearest_neighbors(queries, references=None, k=1, metric="cosine", chunk_size=None,
                      kernel="auto"):
    """Exact k nearest references of every query, computed chunk by chunk.

    Scores are computed on the default TensorFlow device (the GPU when there is
    one), or with faiss' flat index on a CPU where faiss is installed,
    `chunk_size` queries at a time, so score memory is bounded by
    chunk_size x num_references, never queries x references. Among references
    with bitwise-equal scores, the one with the lower index comes first, with
    either kernel.

    Args:
        queries: float array (Q, d), NumPy or tensor.
        references: float array (N, d). Defaults to None: the queries themselves,
            leave-one-out (each query's own row is excluded by index, so exact
            duplicates of a query are still found).
        k: number of neighbours per query. Defaults to 1.
        metric: "cosine", "dot" (inner product) or "euclidean". Defaults to
            "cosine". (`distance=` is its deprecated name.)
        chunk_size: queries per chunk. Defaults to None: for TensorFlow 2**25 / N
            (a 128 MB score buffer), and at least 1,024 while the buffer stays
            within 512 MB (2**27 / N), as thinner chunks slow the matmul down;
            for faiss 65,536 (faiss scores in its own bounded blocks, and runs
            slower on many small calls).
        kernel: `"auto"` (faiss' `IndexFlatIP` / `IndexFlatL2` when faiss is
            installed and TensorFlow sees no GPU, else TensorFlow), `"faiss"`
            or `"tensorflow"`. Defaults to `"auto"`. The two agree on the
            indices except among references whose scores lie within float
            rounding of each other (faiss and TensorFlow may round the last
            bit differently).

    Returns:
        `(indices, scores)`: int32 (Q, k) reference indices, nearest first, and
        float32 (Q, k) scores: cosine similarity, inner product, or for
        "euclidean" minus the squared distance.

    Examples:
        >>> nearest_neighbors(np.eye(3, dtype="float32"), k=2)[0]
        array([[1, 2], [0, 2], [0, 1]], dtype=int32)
    """
    indices, scores = [], []
    for _, idx, sc in iter_nearest_neighbors(queries, references, k, metric, chunk_size,
                                             kernel):
        indices.append(idx.numpy())
        scores.append(sc.numpy())
    return np.concatenate(indices), np.concatenate(scores)
