"""Retrieval metrics: Recall@K, Precision@1, R-Precision and MAP@R from exact kNN."""

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.evaluation.knn import iter_nearest_neighbors

METRICS = ("recall@k", "precision@1", "r_precision", "map@r")


def check_metrics(metrics, ks):
    """Validated (metrics, sorted distinct ks): a ValueError names a bad one."""
    metrics = (metrics,) if isinstance(metrics, str) else tuple(metrics)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown or not metrics:
        raise ValueError(f"metrics must be a non-empty subset of {METRICS}, got {metrics!r}.")
    ks = (ks,) if isinstance(ks, (int, np.integer)) else tuple(ks)
    if "recall@k" in metrics:
        if not ks:
            raise ValueError("ks must name at least one k for recall@k, got ().")
        ks = tuple(sorted({hyperparameters.integer_at_least("every k in ks", k, 1) for k in ks}))
    return metrics, ks


def _class_ids(query_labels, reference_labels):
    """Map both label arrays to dense ids in one shared vocabulary."""
    both = np.concatenate([query_labels, reference_labels])
    try:
        _, ids = np.unique(both, return_inverse=True)
    except TypeError as error:
        raise ValueError(f"labels must be comparable class ids: {error}") from None
    ids = ids.reshape(-1).astype(np.int64)
    return ids[: len(query_labels)], ids[len(query_labels) :], int(ids.max()) + 1


def _search_depth(metrics, ks, r_per_query, num_references):
    """Neighbours to find: the largest K, and for R-metrics the largest class count."""
    k = 1
    if "recall@k" in metrics:
        k = ks[-1]
        if k > num_references:
            raise ValueError(
                f"recall@{k} asks for {k} neighbours but each query has only "
                f"{num_references} references."
            )
    if "r_precision" in metrics or "map@r" in metrics:
        k = max(k, int(r_per_query.max()))
    return k


class _Accumulator:
    """Sums per-query scores chunk by chunk; one method per metric family."""

    def __init__(self, metrics, ks):
        self.metrics, self.ks = metrics, ks
        self.sums = {}

    def _add(self, key, values):
        self.sums[key] = self.sums.get(key, 0.0) + float(np.sum(values, dtype=np.float64))

    def update(self, same, r):
        """`same`: bool (q, k) neighbour shares the query's class; `r`: int (q,) R per query."""
        if "recall@k" in self.metrics:
            hits = np.logical_or.accumulate(same[:, : self.ks[-1]], axis=1)
            for k in self.ks:
                self._add(f"recall@{k}", hits[:, k - 1])
        if "precision@1" in self.metrics:
            self._add("precision@1", same[:, 0])
        if "r_precision" in self.metrics or "map@r" in self.metrics:
            width = int(r.max())
            within_r = np.arange(width)[np.newaxis, :] < r[:, np.newaxis]
            relevant = same[:, :width] & within_r
            if "r_precision" in self.metrics:
                self._add("r_precision", relevant.sum(axis=1) / r)
            if "map@r" in self.metrics:
                precision_at_i = np.cumsum(relevant, axis=1) / np.arange(1, width + 1)
                self._add("map@r", np.sum(precision_at_i * relevant, axis=1) / r)

    def result(self, count):
        return {key: value / count for key, value in self.sums.items()}


@hyperparameters.renamed_keywords(distance="metric")
def retrieval_metrics(
    query_embeddings,
    query_labels,
    reference_embeddings=None,
    reference_labels=None,
    ks=(1, 2, 4, 8),
    metrics=METRICS,
    metric="cosine",
    chunk_size=None,
    kernel="auto",
):
    """Recall@K, Precision@1, R-Precision and MAP@R by exact nearest-neighbour search.

    Each query is ranked against the references (when no references are given:
    against all other queries, leave-one-out, the query's own row excluded by
    index). A query scores 1 for Recall@K when any of its K nearest references
    shares its class. With R the number of references of the query's class,
    R-Precision is the fraction of the R nearest that share it, and MAP@R is
    `1/R * sum_{i<=R} P(i) * rel(i)` (Musgrave et al.). Queries whose class has
    no reference are excluded from every metric and counted.

    The search is exact and chunked (see `nearest_neighbors`): memory is bounded
    by chunk x N; only as many neighbours are found as the metrics need (the
    largest K, and for R-metrics the largest class count). Ties between equal
    scores go to the reference with the lower index.

    Args:
        query_embeddings: float (Q, d) array or tensor.
        query_labels: (Q,) or (Q, 1) class ids (any comparable values).
        reference_embeddings: float (N, d). Defaults to None (leave-one-out on the
            queries).
        reference_labels: (N,) class ids; required with `reference_embeddings`.
        ks: the K of Recall@K. Defaults to (1, 2, 4, 8).
        metrics: subset of ("recall@k", "precision@1", "r_precision", "map@r").
            Defaults to all four.
        metric: "cosine", "dot" or "euclidean": the similarity of the search.
            Defaults to "cosine". (`distance=` is its deprecated name.)
        chunk_size: queries per search chunk. Defaults to None (automatic).
        kernel: the search kernel, `"auto"`, `"faiss"`, `"tensorflow"` or
            `"numpy"` (see `nearest_neighbors`). Defaults to `"auto"`.

    Returns:
        dict: "recall@1", ..., "precision@1", "r_precision", "map@r" as Python
        floats in [0, 1], plus "num_queries" (queries evaluated) and
        "num_excluded_queries" (queries whose class has no reference), ints.

    Examples:
        >>> emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], "float32")
        >>> retrieval_metrics(emb, [0, 0, 1, 1], ks=(1,))["recall@1"]
        1.0

    Reference:
        Musgrave et al., "A Metric Learning Reality Check", ECCV 2020.
    """
    metrics, ks = check_metrics(metrics, ks)
    queries = validation.embedding_array(query_embeddings, "query_embeddings")
    q_labels = validation.label_array(query_labels, queries.shape[0], "query_labels")
    leave_one_out = reference_embeddings is None
    if leave_one_out:
        if reference_labels is not None:
            raise ValueError("reference_labels given without reference_embeddings.")
        references, r_labels = None, q_labels
    else:
        if reference_labels is None:
            raise ValueError("reference_embeddings given without reference_labels.")
        references = validation.embedding_array(reference_embeddings, "reference_embeddings")
        r_labels = validation.label_array(reference_labels, references.shape[0], "reference_labels")

    q_ids, r_ids, num_classes = _class_ids(q_labels, r_labels)
    r_per_query = np.bincount(r_ids, minlength=num_classes)[q_ids] - int(leave_one_out)
    included = r_per_query > 0
    num_queries = int(included.sum())
    if num_queries == 0:
        raise ValueError(
            "No query has a reference of its own class"
            + (" (every class has a single sample)." if leave_one_out else ".")
        )
    k = _search_depth(metrics, ks, r_per_query, len(r_ids) - int(leave_one_out))

    selected = np.flatnonzero(included)
    accumulator = _Accumulator(metrics, ks)
    # Leave-one-out searches every row (excluded rows are still references of others).
    search = iter_nearest_neighbors(
        queries if leave_one_out else queries[selected], references, k, metric, chunk_size,
        kernel)
    for start, indices, _ in search:
        rows = np.arange(start, start + len(indices))
        if leave_one_out:
            keep = included[rows]
            rows, indices = rows[keep], indices[keep]
        else:
            rows = selected[rows]
        same = r_ids[indices] == q_ids[rows][:, np.newaxis]
        if len(rows):
            accumulator.update(same, r_per_query[rows])
    result = accumulator.result(num_queries)
    ordered = {f"recall@{k}": result[f"recall@{k}"] for k in ks if "recall@k" in metrics}
    ordered.update({m: result[m] for m in METRICS[1:] if m in metrics})
    ordered["num_queries"] = num_queries
    ordered["num_excluded_queries"] = int(len(q_ids) - num_queries)
    return ordered
