"""Re-ranking an `Index` search: the methods of `keras_dml.evaluation.rerank`
(alpha-QE, DBA, k-reciprocal; importable from here) on an `Index` as their gallery,
one chunk of queries' candidates at a time."""

import numpy as np

from keras_dml import ops
from keras_dml.evaluation.rerank import (  # noqa: F401 (public here)
    DBA, METHODS, AlphaQE, KReciprocal, check, expand, get, k_reciprocal_distances,
    without_self)

__all__ = ["AlphaQE", "DBA", "IndexGallery", "KReciprocal", "METHODS", "get", "rerank_search"]

_CHUNK = 256  # queries whose candidates are held at once


class IndexGallery:
    """An `Index` as a re-ranker's gallery: its search (with a filter) and stored
    embeddings."""

    def __init__(self, index, size, filter=None):
        self.index, self.filter, self.metric = index, filter, index.metric
        self.size = size  # counted once per re-ranked search
        self.found = {}  # id -> (label, metadata) of the items searches returned

    def search(self, queries, k, rows=None):
        result = self.index.search(queries, k, self.filter)
        for ids, labels, metadata in zip(result.ids, result.labels, result.metadata):
            self.found.update(zip(ids.tolist(), zip(labels.tolist(), metadata)))
        return result.ids, result.scores

    def describe(self, ids):
        """`(labels, metadata)` of returned ids, shaped as `ids`."""
        labels = np.array([[self.found[i][0] for i in row] for row in ids.tolist()]
                          ).reshape(ids.shape)
        return labels, [[self.found[i][1] for i in row] for row in ids.tolist()]

    def similarities(self, queries, ids):
        """float32 similarities (as `Index` scores them) of `queries` (q, d) to the
        items `ids` (q, k)."""
        vectors = self.embeddings(ids).astype(np.float32)
        if self.metric == "cosine":
            queries = ops.unit_rows(queries)
            vectors = ops.unit_rows(vectors.reshape(-1, vectors.shape[-1])).reshape(vectors.shape)
        if self.metric == "euclidean":
            return -np.sum(np.square(queries[:, None] - vectors), axis=-1, dtype=np.float32)
        return np.einsum("qd,qkd->qk", queries, vectors).astype(np.float32)

    def embeddings(self, ids):
        shape = np.shape(ids)
        return self.index.get_embeddings(np.reshape(ids, -1)).reshape(*shape, -1)

    def neighbours(self, ids, n):
        """`(ids, scores)` (m, n) of each item's n nearest other items."""
        result = self.index.search(self.embeddings(ids), min(n + 1, self.size),
                                   self.filter)
        return without_self(ids, result.ids, result.scores, n)


def rerank_search(index, queries, k, filter, rerank):
    """`Index.search(queries, k, filter, rerank=rerank)`: the re-ranked ids, scores,
    labels, metadata and similarities of a `SearchResult`."""
    reranker = get(rerank)
    if filter is not None:
        probe = index.search(queries[:1], 1, filter)
        if not probe.ids.shape[1]:  # no item passes: (Q, 0) results, as a plain search's
            shape = (len(queries), 0)
            return (np.zeros(shape, probe.ids.dtype), np.zeros(shape, np.float32),
                    np.zeros(shape, probe.labels.dtype), [[] for _ in queries],
                    np.zeros(shape, np.float32))
    size = len(index)
    parts = []
    for start in range(0, len(queries), _CHUNK):
        gallery = IndexGallery(index, size, filter)  # one chunk's found items at a time
        chunk = queries[start:start + _CHUNK]
        ids, scores = reranker.rerank(gallery, chunk, k, None)
        parts.append((ids, scores, *gallery.describe(ids), gallery.similarities(chunk, ids)))
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]), [row for p in parts for row in p[3]],
            np.concatenate([p[4] for p in parts]))
