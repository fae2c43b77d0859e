"""The TensorFlow kernel of the exact kNN search (`keras_dml.evaluation.knn`).

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
"""

import math

import numpy as np
import tensorflow as tf

from keras_dml import ops

__all__ = ["Prepared"]

_NEG = float(-np.finfo(np.float32).max)  # score of padding


def _group_size(width, k):
    """Block size b of the two-stage top-k; 1 means a plain top-k."""
    b = int(math.sqrt(width / k))
    return b if b >= 2 and width // b >= k else 1


def _block_order(total, group):
    """Original reference index at each stored position: position j*G + g holds g*b + j."""
    return np.arange(total).reshape(total // group, group).T.reshape(-1)


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
    tf.TensorSpec([], tf.int32),  # k
    tf.TensorSpec([], tf.int32),  # group
])
def _chunk(queries, references, k, group):
    """Queries (t, d') against all stored references (n', d'): exact top-k.

    Traced once: shapes, k and the block size are all tensors, so a series of
    query batch sizes, k's or galleries never retraces it.
    """
    scores = tf.matmul(queries, references, transpose_b=True)
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


class Prepared:
    """The references stored for searches of depth `k`: augmented, padded and permuted
    into blocks, on TensorFlow's default device.

    Args:
        references: float32 `(N, d)`.
        metric: `"cosine"`, `"dot"` or `"euclidean"`.
        k: neighbours per query (the block size depends on it).
    """

    def __init__(self, references, metric, k):
        n = references.shape[0]
        self.metric, self.k, self.group = metric, k, _group_size(n, k)
        total = n + (-n) % self.group
        stored = _augment(references, metric, total - n, query_side=False)
        self.references = tf.constant(stored[_block_order(total, self.group)])

    def search(self, queries, chunk_size):
        """Yield (start, indices, scores) NumPy chunks of `queries` (float32 `(Q, d)`)."""
        qry = tf.constant(_augment(queries, self.metric, 0, query_side=True))
        for start in range(0, queries.shape[0], chunk_size):
            values, indices = _chunk(qry[start:start + chunk_size], self.references,
                                     tf.constant(self.k), tf.constant(self.group))
            yield start, indices.numpy(), values.numpy()
