"""Search backends of `Index`: exact (the evaluation's kNN kernels) and faiss (approximate).

A backend maps `(gallery (N, d), queries (Q, d), k)` to `(positions, scores)`:
int64 `(Q, k)` gallery rows and float32 `(Q, k)` similarities, best first.
Approximate backends build their structure lazily at the first search after
the gallery changed.
"""

import math

import numpy as np

from keras_dml import ops
from keras_dml.evaluation.knn import nearest_neighbors
from keras_dml.evaluation.knn_faiss import KERNELS, FlatIndex, resolve_kernel
from keras_dml.hyperparameters import integer_at_least

BACKENDS = ("exact", "faiss_ivf", "faiss_hnsw")
BLOCK_ROWS = 2**18  # gallery rows handed to the kNN kernel at once


def exact_search(gallery, queries, k, metric, block_rows=BLOCK_ROWS):
    """Exact top-k by the TensorFlow kernel of `keras_dml.evaluation.nearest_neighbors`,
    block by block.

    The kernel bounds its score memory by chunks of queries but prepares a
    copy of the references it is given; handing it the gallery in blocks of
    `block_rows` rows bounds that copy too. The blocks' top-k are merged by
    score, ties to the lower gallery row, as the kernel orders them.
    """
    positions, scores = [], []
    for start in range(0, len(gallery), block_rows):
        block = gallery[start:start + block_rows]
        indices, values = nearest_neighbors(queries, block, min(k, len(block)), metric,
                                            kernel="tensorflow")
        positions.append(indices.astype(np.int64) + start)
        scores.append(values)
    if len(positions) == 1:
        return positions[0], scores[0]
    positions, scores = np.concatenate(positions, axis=1), np.concatenate(scores, axis=1)
    # Candidates sit in gallery-row order within equal scores: a stable sort keeps it.
    best = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(positions, best, 1), np.take_along_axis(scores, best, 1)


class Exact:
    """Every item scored: faiss' flat index (kept between searches) or the TensorFlow
    kernel, as the `kernel` option says (see `keras_dml.evaluation.nearest_neighbors`)."""

    name = "exact"

    def __init__(self, metric, kernel="auto"):
        if kernel not in KERNELS:
            raise ValueError(f"The exact backend's kernel must be one of {KERNELS}, got "
                             f"{kernel!r}.")
        self.metric = metric
        self.options = {"kernel": kernel}
        self._flat = None

    def invalidate(self):
        self._flat = None

    def search(self, gallery, queries, k):
        if resolve_kernel(self.options["kernel"]) == "tensorflow":
            return exact_search(gallery, queries, k, self.metric)
        if self._flat is None:
            self._flat = FlatIndex(gallery, self.metric)
        return self._flat.search(queries, k)


class _Faiss:
    """Shared faiss plumbing: metric mapping, lazy (re)build, search."""

    def __init__(self, metric, options):
        try:
            import faiss
        except ImportError as error:
            raise ImportError(
                f"The {self.name!r} backend needs faiss: pip install \"keras_dml[ann]\" "
                "(or faiss-cpu)."
            ) from error
        self._faiss = faiss
        self.metric = metric
        self.options = self._check_options(options)
        self._built = None

    def invalidate(self):
        self._built = None

    def _prepare(self, x):
        x = np.ascontiguousarray(x, dtype=np.float32)
        if self.metric == "cosine":
            x = ops.unit_rows(x)
        return x

    def _faiss_metric(self):
        faiss = self._faiss
        return faiss.METRIC_L2 if self.metric == "euclidean" else faiss.METRIC_INNER_PRODUCT

    def search(self, gallery, queries, k):
        if self._built is None:
            self._built = self._build(self._prepare(gallery))
        scores, positions = self._built.search(self._prepare(queries), k)
        if self.metric == "euclidean":  # faiss returns squared distances
            scores = -scores
        missing = positions < 0  # fewer than k candidates reached: worst score
        scores = np.where(missing, -np.inf, scores).astype(np.float32)
        return positions.astype(np.int64), scores

    def _check_options(self, options):
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise ValueError(f"Unknown {self.name} options {sorted(unknown)}; known: "
                             f"{sorted(self.defaults)}.")
        for key, value in options.items():
            if value is not None:
                integer_at_least(key, value, 1, strict=True)
        return {**self.defaults, **{k: int(v) for k, v in options.items() if v is not None}}


class FaissIVF(_Faiss):
    """faiss `IndexIVFFlat`: k-means cells, `nprobe` of them scanned per query."""

    name = "faiss_ivf"
    defaults = {"nlist": None, "nprobe": 16}

    def _build(self, gallery):
        faiss = self._faiss
        n, d = gallery.shape
        nlist = self.options["nlist"] or max(1, min(n // 39, int(4 * math.sqrt(n))))
        quantizer = (faiss.IndexFlatL2(d) if self.metric == "euclidean"
                     else faiss.IndexFlatIP(d))
        index = faiss.IndexIVFFlat(quantizer, d, nlist, self._faiss_metric())
        index.train(gallery)
        index.add(gallery)
        index.nprobe = min(self.options["nprobe"], nlist)
        self._quantizer = quantizer  # the IVF index refers to it: keep it alive
        return index


class FaissHNSW(_Faiss):
    """faiss `IndexHNSWFlat`: a navigable small-world graph, `ef_search` wide."""

    name = "faiss_hnsw"
    defaults = {"m": 32, "ef_search": 64, "ef_construction": 80}

    def _build(self, gallery):
        index = self._faiss.IndexHNSWFlat(gallery.shape[1], self.options["m"],
                                          self._faiss_metric())
        index.hnsw.efConstruction = self.options["ef_construction"]
        index.add(gallery)
        index.hnsw.efSearch = self.options["ef_search"]
        return index


def make(name, metric, options):
    """The backend object for `name`."""
    if name == "exact":
        unknown = set(options) - {"kernel"}
        if unknown:
            raise ValueError(f"Unknown exact options {sorted(unknown)}; known: ['kernel'].")
        return Exact(metric, **options)
    if name == "faiss_ivf":
        return FaissIVF(metric, options)
    if name == "faiss_hnsw":
        return FaissHNSW(metric, options)
    raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}.")
