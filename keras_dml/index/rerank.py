"""Re-ranking an `Index` search: the methods of `keras_dml.evaluation.rerank`
(alpha-QE, DBA, k-reciprocal; importable from here) on an `Index` as their gallery,
one chunk of queries' candidates at a time."""

import numpy as np

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
    labels and metadata of a `SearchResult`."""
    reranker = get(rerank)
    size = len(index)
    parts = []
    for start in range(0, len(queries), _CHUNK):
        gallery = IndexGallery(index, size, filter)  # one chunk's found items at a time
        ids, scores = reranker.rerank(gallery, queries[start:start + _CHUNK], k, None)
        parts.append((ids, scores, *gallery.describe(ids)))
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]), [row for p in parts for row in p[3]])
