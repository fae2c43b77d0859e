"""Exact k-nearest-neighbour search in chunks, in memory bounded by chunk x N.

Three kernels give the same neighbours, in the same order (among bitwise-equal
scores the reference with the lower index wins):

* `"tensorflow"` (`keras_dml.evaluation.knn_tensorflow`): a matmul and an exact
  two-stage top-k per chunk on TensorFlow's default device (the GPU when there is
  one); on the TensorFlow backend only, unless asked for by name.
* `"faiss"` (`keras_dml.evaluation.knn_faiss`): faiss' flat index on the CPU.
* `"numpy"`: a NumPy matmul and `argpartition` per chunk, for any backend without
  faiss.

`kernel="auto"` picks faiss where it is installed (TensorFlow's kernel instead when
Keras runs on TensorFlow with a GPU), else TensorFlow's kernel on the TensorFlow
backend and NumPy on the others.
"""

import numpy as np

from keras_dml import hyperparameters, ops, validation
from keras_dml.evaluation.knn_faiss import FlatIndex, resolve_kernel

_SCORE_BUDGET = 2**25  # float32 scores in one chunk: 128 MB
_MIN_CHUNK_ROWS = 1024  # fewer rows a chunk waste the matmul (a thin operand reread per chunk)
_MAX_SCORE_BUDGET = 2**27  # how far the buffer grows (512 MB) to keep _MIN_CHUNK_ROWS
_NUMPY_SCORE_BUDGET = 2**23  # scores per NumPy chunk: 32 MB, plus 64 MB of sort keys
_FAISS_CHUNK_ROWS = 2**16  # queries per faiss call: results of (k + 8) x 12 bytes each


def _numpy_search(queries, references, k, metric, chunk_size, leave_one_out):
    """`(start, indices, scores)` chunks by a NumPy matmul and an exact top-k."""
    if metric == "cosine":
        queries, references = ops.unit_rows(queries), ops.unit_rows(references)
    queries = queries.astype(np.float32, copy=False)
    references = references.astype(np.float32, copy=False)
    if metric == "euclidean":
        query_norms = np.einsum("ij,ij->i", queries, queries)
        reference_norms = np.einsum("ij,ij->i", references, references)
    for start in range(0, queries.shape[0], chunk_size):
        stop = min(start + chunk_size, queries.shape[0])
        scores = queries[start:stop] @ references.T
        if metric == "euclidean":  # -|q - r|^2
            scores = 2.0 * scores - query_norms[start:stop, np.newaxis] - reference_norms
        if leave_one_out:
            scores[np.arange(stop - start), np.arange(start, stop)] = -np.inf
        indices = _top_k(scores, k)
        yield start, indices.astype(np.int32), np.take_along_axis(scores, indices, 1)


def _top_k(scores, k):
    """Column indices of the k largest of each row of float32 `scores`, largest first,
    bitwise-equal scores in index order: one int64 key per score that orders by
    (score, -index) without ties, so `argpartition` is exact."""
    n = scores.shape[1]
    bits = (scores + np.float32(0.0)).view(np.int32).astype(np.int64)  # -0.0 is 0.0
    ordered = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # int order = float order
    keys = ordered * n + (n - 1 - np.arange(n))
    top = np.argpartition(-keys, k - 1, axis=1)[:, :k] if k < n else np.tile(
        np.arange(n), (len(scores), 1))
    order = np.argsort(-np.take_along_axis(keys, top, 1), axis=1)
    return np.take_along_axis(top, order, 1)


def _faiss_search(queries, references, k, metric, chunk_size, leave_one_out):
    """`_search` through faiss' flat index (`knn_faiss.FlatIndex`), same order."""
    index = FlatIndex(references, metric)
    for start in range(0, queries.shape[0], chunk_size):
        stop = min(start + chunk_size, queries.shape[0])
        own = np.arange(start, stop) if leave_one_out else None
        indices, values = index.search(queries[start:stop], k, own)
        yield start, indices.astype(np.int32), values


def _default_chunk_size(num_references, kernel="tensorflow"):
    """Queries per chunk. TensorFlow: a 128 MB score buffer, grown up to 512 MB for
    1,024 queries; NumPy: 32 MB of scores; faiss: `_FAISS_CHUNK_ROWS`."""
    if kernel == "faiss":  # faiss bounds its score memory itself, and slows down on small calls
        return _FAISS_CHUNK_ROWS
    if kernel == "numpy":
        return max(1, _NUMPY_SCORE_BUDGET // num_references)
    grown = min(_MIN_CHUNK_ROWS, _MAX_SCORE_BUDGET // num_references)
    return max(1, _SCORE_BUDGET // num_references, grown)


@hyperparameters.renamed_keywords(distance="metric")
def iter_nearest_neighbors(queries, references=None, k=1, metric="cosine", chunk_size=None,
                           kernel="auto"):
    """Yield `(start, indices, scores)` for consecutive chunks of queries.

    Same arguments and results as `nearest_neighbors`, but only one chunk of
    results is alive at a time; `indices` and `scores` are NumPy arrays of the
    chunk of queries starting at row `start`.
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
    if chunk_size is None:
        chunk_size = _default_chunk_size(n, kernel)
    chunk_size = hyperparameters.integer_at_least("chunk_size", chunk_size, 1)
    if kernel == "tensorflow":
        from keras_dml.evaluation import knn_tensorflow

        search = knn_tensorflow.search
    else:
        search = _faiss_search if kernel == "faiss" else _numpy_search
    yield from search(queries, references, k, metric, chunk_size, leave_one_out)


@hyperparameters.renamed_keywords(distance="metric")
def nearest_neighbors(queries, references=None, k=1, metric="cosine", chunk_size=None,
                      kernel="auto"):
    """Exact k nearest references of every query, computed chunk by chunk.

    Scores are computed by one of three kernels (see the module's docstring),
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
            slower on many small calls); for NumPy 2**23 / N (32 MB of scores).
        kernel: `"auto"` (faiss' `IndexFlatIP` / `IndexFlatL2` when faiss is
            installed, unless Keras runs on TensorFlow with a GPU; else
            TensorFlow's kernel on the TensorFlow backend, NumPy on the others),
            `"faiss"`, `"tensorflow"` or `"numpy"`. Defaults to `"auto"`. They
            agree on the indices except among references whose scores lie
            within float rounding of each other (each may round the last bit
            differently).

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
        indices.append(idx)
        scores.append(sc)
    return np.concatenate(indices), np.concatenate(scores)
