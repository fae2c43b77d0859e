"""Search backends of `Index`: exact (`keras_dml.evaluation.knn`) and faiss (approximate).

A backend maps `(gallery (N, d), queries (Q, d), k)` to `(positions, scores)`:
int64 `(Q, k)` gallery rows and float32 `(Q, k)` similarities, best first.
Backends prepare the gallery lazily at the first search after it changed.
"""

import math

import numpy as np

from keras_dml import ops
from keras_dml.evaluation.knn import ExactSearch
from keras_dml.evaluation.knn_faiss import KERNELS, resolve_kernel
from keras_dml.hyperparameters import integer_at_least

__all__ = ["BACKENDS", "Exact", "FaissHNSW", "FaissIVF", "make"]

BACKENDS = ("exact", "faiss_ivf", "faiss_hnsw")


class Exact:
    """Every item scored by the evaluation's exact search (`keras_dml.evaluation.knn`),
    with the kernel the `kernel` option names: `"auto"` (default), `"numpy"`,
    `"tensorflow"` or `"faiss"`. Among equal scores the item added first comes first.

    Raises:
        ValueError: an unknown kernel.
        ImportError: a kernel whose package is not installed (`"faiss"`, `"tensorflow"`).
    """

    name = "exact"

    def __init__(self, metric, kernel="auto"):
        if kernel not in KERNELS:
            raise ValueError(f"The exact backend's kernel must be one of {KERNELS}, got "
                             f"{kernel!r}.")
        resolve_kernel(kernel)  # a kernel named without its package fails here, not later
        self.metric = metric
        self.options = {"kernel": kernel}
        self._search = None

    def invalidate(self):
        self._search = None

    def search(self, gallery, queries, k):
        if self._search is None:
            self._search = ExactSearch(gallery, self.metric, self.options["kernel"])
        chunks = list(self._search.search(np.asarray(queries, np.float32), k))
        return (np.concatenate([chunk[1] for chunk in chunks]),
                np.concatenate([chunk[2] for chunk in chunks]))


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
