"""The in-memory store of `Index`: NumPy arrays searched by an exact or faiss backend.

Items keep their insertion order (an upserted item moves to the end). A
filtered search scores the passing items exactly, whatever the backend.
"""

import numpy as np

from keras_dml.index import backends, filters

__all__ = ["MemoryStore"]


class MemoryStore:
    """Embeddings, ids, labels, metadata and times added, held as arrays."""

    def __init__(self, metric, backend, options):
        self.metric = metric
        self._backend = backends.make(backend, metric, options)
        self.name = self._backend.name
        self.options = self._backend.options
        self.record = None
        self._chunks = []  # embeddings added since the last consolidation
        self._embeddings = None
        self._ids = None
        self._labels = None
        self._metadata = []
        self._added = np.zeros([0])

    @property
    def embeddings(self):
        if self._chunks:
            parts = ([] if self._embeddings is None else [self._embeddings]) + self._chunks
            self._embeddings = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._chunks = []
        return self._embeddings

    def arrays(self, fields=None):
        """`(embeddings, ids, labels, metadata, added)` in insertion order (`fields`:
        as in `MilvusStore.arrays`; every array is at hand here)."""
        return self.embeddings, self._ids, self._labels, self._metadata, self._added

    def count(self):
        return len(self._added)

    def contains(self, ids):
        if self._ids is None:
            return np.zeros(len(ids), bool)
        return np.isin(ids, self._ids)

    def insert(self, embeddings, ids, labels, metadata, added, replace=False):
        if replace:
            present = ids[self.contains(ids)]
            if present.size:
                self.delete(present)
        self._chunks.append(embeddings.copy())  # later changes to the caller's array stay out
        self._ids = ids if self._ids is None else np.concatenate([self._ids, ids])
        self._labels = labels if self._labels is None else np.concatenate([self._labels, labels])
        self._metadata.extend(metadata)
        self._added = np.concatenate([self._added, added])
        self._backend.invalidate()

    def delete(self, ids):
        keep = ~np.isin(self._ids, ids)
        self._embeddings = self.embeddings[keep]
        self._ids, self._labels = self._ids[keep], self._labels[keep]
        self._added = self._added[keep]
        self._metadata = [m for m, k in zip(self._metadata, keep) if k]
        self._backend.invalidate()

    def get(self, ids):
        """Embeddings of `ids` in their order (every id must be present)."""
        order = np.argsort(self._ids, kind="stable")
        return self.embeddings[order[np.searchsorted(self._ids, ids, sorter=order)]].astype(
            np.float32)

    def search(self, queries, k, conditions=None):
        """`(ids, scores, labels, metadata)` of the k best items per query, best first.

        Without conditions k must not exceed the count; with them the passing
        items are scored exactly and k is capped at their number.
        """
        gallery = self.embeddings
        if conditions:
            rows = np.flatnonzero(self._mask(conditions))
            k = min(k, len(rows))
            if not k:
                return self._result(np.zeros((len(queries), 0), np.int64),
                                    np.zeros((len(queries), 0), np.float32))
            positions, scores = backends.Exact(self.metric).search(gallery[rows], queries, k)
            return self._result(rows[positions], scores)
        return self._result(*self._backend.search(gallery, queries, k))

    def _result(self, positions, scores):
        metadata = [[self._metadata[p] for p in row] for row in positions.tolist()]
        return (self._ids[positions], scores.astype(np.float32), self._labels[positions],
                metadata)

    def _mask(self, conditions):
        mask = np.ones(len(self._added), bool)
        for condition in conditions:
            mask &= self._condition_mask(condition)
        return mask

    def _condition_mask(self, condition):
        columns = {"id": self._ids, "label": self._labels, "added": self._added}
        if condition.field in columns:
            return _column_mask(columns[condition.field], condition)
        items = ({"metadata": m} for m in self._metadata)
        return np.fromiter((filters.passes([condition], item) for item in items), bool,
                           len(self._metadata))

    def close(self):
        pass


def _column_mask(values, condition):
    """`filters.passes` on a whole NumPy column (numbers or strings)."""
    strings = values.dtype.kind == "U"
    wanted = condition.value if isinstance(condition.value, list) else [condition.value]
    usable = [v for v in wanted if isinstance(v, str) == strings and not isinstance(v, bool)]
    if condition.op in filters.MEMBERSHIP:
        found = np.isin(values, np.asarray(usable, dtype=values.dtype if strings else float))
        return found if condition.op == "in" else ~found
    if not usable:  # a value of the other kind: never equal, never ordered
        return np.full(len(values), condition.op == "!=")
    return filters.OPERATORS[condition.op](values, usable[0])

