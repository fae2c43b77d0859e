"""The faiss kernel of the exact kNN search (`keras_dml.evaluation.knn`), and the choice
of kernel (`resolve_kernel`).

faiss' `IndexFlatIP` (cosine on unit rows, dot) and `IndexFlatL2` (euclidean)
score every gallery item, as the other kernels do, but order equal
scores as their heaps happen to. To give the kernel's documented order (equal
scores: the lower reference index first), each query asks faiss for a few more
than k neighbours, sorts them by (score, index), and is searched again deeper
while the last one fetched still scores as high as the k-th: then every
reference left out scores strictly lower, so the k kept are the top k in that
order.

Scores are faiss' float32 (for "euclidean" minus its squared distance); they
can differ from TensorFlow's in the last bits, so references whose scores lie
within float rounding of each other may be ranked in another order than the
TensorFlow kernel ranks them. Bitwise-equal scores are ranked alike.
"""

import numpy as np

from keras_dml import backend, ops

__all__ = ["FlatIndex", "KERNELS", "faiss_module", "resolve_kernel"]

KERNELS = ("auto", "faiss", "tensorflow", "numpy")
_EXTRA = 8  # neighbours fetched beyond k, to see ties at the k-th place


def faiss_module():
    """The `faiss` module, or None when it is not installed."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def resolve_kernel(kernel):
    """`"faiss"`, `"tensorflow"` or `"numpy"`: the kernel `kernel` names on this machine.

    `"auto"` is faiss when it is installed, unless Keras runs on TensorFlow and
    TensorFlow sees a GPU (then TensorFlow's kernel runs there); without faiss it is
    TensorFlow's kernel on the TensorFlow backend and NumPy's on the others: `"auto"`
    never needs a package that is absent, and a kernel named is the kernel served.

    Raises:
        ValueError: `kernel` is not one of `KERNELS`.
        ImportError: `"faiss"` without faiss installed, or `"tensorflow"` without
            TensorFlow.
    """
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}.")
    if kernel == "tensorflow":
        backend.require_tensorflow('kernel="tensorflow"')
    if kernel in ("tensorflow", "numpy"):
        return kernel
    if faiss_module() is None:
        if kernel == "faiss":
            raise ImportError('kernel="faiss" needs faiss, which is not installed here: '
                              'pip install faiss-cpu (or "keras_dml[ann]"), or pass '
                              'kernel="numpy" (or "auto").')
        return "tensorflow" if backend.is_tensorflow() else "numpy"
    if kernel == "auto" and backend.is_tensorflow():
        import tensorflow as tf

        if tf.config.list_logical_devices("GPU"):
            return "tensorflow"
    return "faiss"


class FlatIndex:
    """The references in a faiss flat index, searched in the TensorFlow kernel's order.

    Args:
        references: float32 `(N, d)`.
        metric: `"cosine"`, `"dot"` or `"euclidean"`.
    """

    def __init__(self, references, metric):
        faiss = faiss_module()
        if faiss is None:
            raise ImportError('FlatIndex needs faiss, which is not installed here: pip install '
                              'faiss-cpu (or "keras_dml[ann]").')
        self.metric = metric
        references = self._prepare(references)
        self.size, dim = references.shape
        self._index = faiss.IndexFlatL2(dim) if metric == "euclidean" else faiss.IndexFlatIP(dim)
        self._index.add(references)

    def _prepare(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        return np.ascontiguousarray(ops.unit_rows(x), dtype=np.float32) \
            if self.metric == "cosine" else x

    def search(self, queries, k):
        """`(indices int64 (Q, k), scores float32 (Q, k))`, best first, ties to the lower index.

        Args:
            queries: float32 `(Q, d)`.
            k: Neighbours per query, at most N.
        """
        queries = self._prepare(queries)
        indices = np.empty((len(queries), k), np.int64)
        scores = np.empty((len(queries), k), np.float32)
        rows = np.arange(len(queries))
        fetch = min(self.size, k + _EXTRA)
        while len(rows):
            found, values, complete = self._ranked(queries[rows], k, fetch)
            indices[rows[complete]] = found[complete]
            scores[rows[complete]] = values[complete]
            rows = rows[~complete]
            fetch = min(self.size, 2 * fetch)
        return indices, scores

    def _ranked(self, queries, k, fetch):
        """The top k of `fetch` neighbours by (score desc, index asc), and per query whether
        nothing left unfetched can tie with its k-th."""
        values, found = self._index.search(queries, fetch)
        if self.metric == "euclidean":  # faiss returns squared distances
            values = -values
        deepest = values[:, -1].copy()
        # faiss sorts by score; rows with equal scores are sorted again, ties by index.
        tied = np.flatnonzero((values[:, 1:] == values[:, :-1]).any(axis=1))
        if len(tied):
            order = np.lexsort((found[tied], -values[tied]), axis=-1)
            found[tied] = np.take_along_axis(found[tied], order, 1)
            values[tied] = np.take_along_axis(values[tied], order, 1)
        found, values = found[:, :k], values[:, :k]
        complete = (deepest < values[:, -1]) | (fetch >= self.size)
        return found, values.astype(np.float32), complete
