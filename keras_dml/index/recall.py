"""How much an approximate index (Milvus HNSW or IVF_FLAT, faiss IVF or HNSW) misses:
recall@k of its search against an exact scan of the same stored vectors."""

import dataclasses
import time

import numpy as np

from keras_dml import hyperparameters
from keras_dml.evaluation.rerank import without_self

__all__ = ["RecallResult", "approximate_recall"]


@dataclasses.dataclass(frozen=True)
class RecallResult:
    """What `approximate_recall` measured.

    Attributes:
        recall: Mean over the sampled items of the fraction of their k exact nearest
            other items that the index's search returned among its k.
        k: Nearest other items compared per item (at most the index's size - 1).
        queries: Items sampled.
        size: Items in the index.
        worst: The lowest recall of one sampled item.
        search_seconds: Time of the index's search of the sampled items.
    """

    recall: float
    k: int
    queries: int
    size: int
    worst: float
    search_seconds: float


def approximate_recall(index, sample=200, k=10, seed=0):
    """Recall@k of `index.search` against an exact scan of its own stored vectors.

    `sample` stored items (drawn with `seed`, without replacement) are searched with
    their own vectors; for each, the k nearest other items the index returns are
    compared with the exact k nearest other items (the item itself left out of
    both). The whole index's vectors are read into memory for the exact scan.

    Args:
        index: A `keras_dml.index.Index` of at least 2 items (any backend; on an
            exact one the recall is 1 up to ties).
        sample: Items searched. Defaults to 200 (all of them when fewer).
        k: Nearest other items compared. Defaults to 10.
        seed: The sample's seed. Defaults to 0.

    Returns:
        A `RecallResult`.
    """
    from keras_dml.index.index import Index

    sample = hyperparameters.integer_at_least("sample", sample, 1)
    k = hyperparameters.integer_at_least("k", k, 1)
    vectors, ids = index.embeddings, index.ids
    size = 0 if vectors is None else len(vectors)
    if size < 2:
        raise ValueError(f"recall needs an index of at least 2 items, it holds {size}.")
    k = min(k, size - 1)
    chosen = np.sort(np.random.default_rng(seed).choice(size, min(sample, size),
                                                        replace=False))
    queries = vectors[chosen]
    started = time.perf_counter()
    found = index.search(queries, k + 1)
    seconds = time.perf_counter() - started
    exact = Index(index.metric, "exact", kernel="numpy")
    exact.add(vectors)  # ids 0..size-1: positions in `ids`
    truth = exact.search(queries, k + 1)
    found_ids, _ = without_self(ids[chosen], found.ids, found.scores, k)
    exact_ids, _ = without_self(ids[chosen], ids[truth.ids], truth.scores, k)
    hits = np.array([len(set(a.tolist()) & set(e.tolist())) / k
                     for a, e in zip(found_ids, exact_ids)])
    return RecallResult(float(hits.mean()), k, len(chosen), size, float(hits.min()), seconds)
