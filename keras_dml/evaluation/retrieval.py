"""Retrieval metrics: Recall@K, Precision@K, R-Precision, MAP@R and mAP from exact kNN.

`ranking_metrics` and `average_precisions` are the one core of these metrics:
`retrieval_metrics` (leave-one-out or query/gallery, summed chunk by chunk) and
`keras_dml.evaluation.query_gallery.retrieval_report` (per query, with exclusions
and re-ranking) both compute them there, from the one exact search
(`keras_dml.evaluation.knn`), so they agree by construction.
"""

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.evaluation import knn

__all__ = ["METRICS", "average_precisions", "check_metrics", "class_ids", "ranking_metrics",
           "retrieval_metrics"]

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


def class_ids(query_labels, gallery_labels):
    """`(query ids, gallery ids, number of classes)`: both label arrays as dense int64
    ids of one shared vocabulary."""
    both = np.concatenate([query_labels, gallery_labels])
    try:
        _, ids = np.unique(both, return_inverse=True)
    except TypeError as error:
        raise ValueError(f"labels must be comparable class ids: {error}") from None
    ids = ids.reshape(-1).astype(np.int64)
    return ids[: len(query_labels)], ids[len(query_labels) :], int(ids.max()) + 1


def ranking_metrics(same, relevant, ks=(), precision_ks=(), r_metrics=True):
    """Per-query metrics of ranked result lists: the one core of the retrieval metrics.

    Args:
        same: bool `(q, w)`: whether each result, best first, shares the query's class
            (False for a missing result). w reaches every K and every query's R.
        relevant: int `(q,)`: R, the gallery items of the query's class that it may
            find (at least 1).
        ks: the K of Recall@K.
        precision_ks: the K of Precision@K.
        r_metrics: whether to compute R-Precision and MAP@R. Defaults to True.

    Returns:
        dict of float64 `(q,)` arrays: "recall@K" (one of the K first is relevant),
        "precision@K" (the fraction of the K first that are), "r_precision" (of the
        R first) and "map@r" (`1/R * sum_{i<=R} P(i) * rel(i)`, Musgrave et al.).
    """
    out = {}
    hits = np.logical_or.accumulate(same, axis=1)
    for k in ks:
        out[f"recall@{k}"] = hits[:, k - 1].astype(np.float64)
    for k in precision_ks:
        out[f"precision@{k}"] = same[:, :k].mean(axis=1)
    if not r_metrics:
        return out
    width = int(relevant.max())
    within_r = same[:, :width] & (np.arange(width)[np.newaxis, :] < relevant[:, np.newaxis])
    out["r_precision"] = within_r.sum(axis=1) / relevant
    precision = np.cumsum(within_r, axis=1) / np.arange(1, width + 1)
    out["map@r"] = np.sum(precision * within_r, axis=1) / relevant
    return out


def average_precisions(scores, positives, top):
    """Each query's AP over its whole ranking: the list `top` first (exact or re-ranked),
    then every other item in the exact order (higher score, then the lower index).

    It depends on neither the length of `top` nor any K: with the exact list, it is
    the AP of the exact ranking.

    Args:
        scores: float32 `(q, N)`, excluded items at -inf.
        positives: bool `(q, N)`: the relevant items (never an excluded one).
        top: int `(q, w)` gallery indices (`knn.MISSING` allowed at the end).

    Returns:
        float64 `(q,)`.
    """
    keys = knn.order_keys(scores)
    out = np.empty(len(scores))
    for i, (row_keys, row_positives, row_top) in enumerate(zip(keys, positives, top)):
        listed = row_top[row_top >= 0]
        ranks = [np.flatnonzero(row_positives[listed]) + 1]
        rest = row_positives.copy()
        rest[listed] = False
        if rest.any():
            others = np.ones(len(row_keys), bool)
            others[listed] = False
            ordered = np.sort(row_keys[others])
            above = len(ordered) - np.searchsorted(ordered, row_keys[rest], side="right")
            ranks.append(len(listed) + above + 1)
        ranks = np.sort(np.concatenate(ranks)).astype(np.float64)
        out[i] = np.mean(np.arange(1, len(ranks) + 1) / ranks)
    return out


def _search_depth(metrics, ks, r_per_query, available):
    """Neighbours to find: the largest K, and for R-metrics the largest class count."""
    k = 1
    if "recall@k" in metrics:
        k = ks[-1]
        if k > available:
            raise ValueError(
                f"recall@{k} asks for {k} neighbours but each query has only "
                f"{available} gallery items."
            )
    if "r_precision" in metrics or "map@r" in metrics:
        k = max(k, int(r_per_query.max()))
    return k


def _gallery_arguments(query_labels, gallery_embeddings, gallery_labels):
    """`(gallery or None, gallery labels)`, validated; None means leave-one-out."""
    if gallery_embeddings is None:
        if gallery_labels is not None:
            raise ValueError("gallery_labels given without gallery_embeddings.")
        return None, query_labels
    if gallery_labels is None:
        raise ValueError("gallery_embeddings given without gallery_labels.")
    gallery = validation.embedding_array(gallery_embeddings, "gallery_embeddings")
    return gallery, validation.label_array(gallery_labels, len(gallery), "gallery_labels")


@hyperparameters.renamed_keywords(distance="metric", reference_embeddings="gallery_embeddings",
                                  reference_labels="gallery_labels")
def retrieval_metrics(
    query_embeddings,
    query_labels,
    gallery_embeddings=None,
    gallery_labels=None,
    ks=(1, 2, 4, 8),
    metrics=METRICS,
    metric="cosine",
    chunk_size=None,
    kernel="auto",
):
    """Recall@K, Precision@1, R-Precision and MAP@R by exact nearest-neighbour search.

    Each query is ranked against the gallery (when no gallery is given: against
    all other queries, leave-one-out, the query's own row excluded by index). A
    query scores 1 for Recall@K when any of its K nearest gallery items shares
    its class. With R the number of gallery items of the query's class,
    R-Precision is the fraction of the R nearest that share it, and MAP@R is
    `1/R * sum_{i<=R} P(i) * rel(i)` (Musgrave et al.). Queries whose class has
    no gallery item are excluded from every metric and counted.

    The search is exact and chunked (see `nearest_neighbors`): memory is bounded
    by chunk x N; only as many neighbours are found as the metrics need (the
    largest K, and for R-metrics the largest class count). Among equal scores
    the gallery item with the lower index comes first.

    Args:
        query_embeddings: float (Q, d) array or tensor.
        query_labels: (Q,) or (Q, 1) class ids (any comparable values).
        gallery_embeddings: float (N, d). Defaults to None (leave-one-out on the
            queries). (`reference_embeddings=` is its deprecated name.)
        gallery_labels: (N,) class ids; required with `gallery_embeddings`.
            (`reference_labels=` is its deprecated name.)
        ks: the K of Recall@K. Defaults to (1, 2, 4, 8).
        metrics: subset of ("recall@k", "precision@1", "r_precision", "map@r").
            Defaults to all four.
        metric: "cosine", "dot" or "euclidean": the similarity of the search.
            Defaults to "cosine". (`distance=` is its deprecated name.)
        chunk_size: queries per search chunk. Defaults to None (automatic).
        kernel: the search kernel, `"auto"`, `"numpy"`, `"tensorflow"` or
            `"faiss"` (see `nearest_neighbors`). Defaults to `"auto"`.

    Returns:
        dict: "recall@1", ..., "precision@1", "r_precision", "map@r" as Python
        floats in [0, 1], plus "num_queries" (queries evaluated) and
        "num_excluded_queries" (queries whose class has no gallery item), ints.

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
    gallery, g_labels = _gallery_arguments(q_labels, gallery_embeddings, gallery_labels)
    leave_one_out = gallery is None
    q_ids, g_ids, num_classes = class_ids(q_labels, g_labels)
    r_per_query = np.bincount(g_ids, minlength=num_classes)[q_ids] - int(leave_one_out)
    included = r_per_query > 0
    num_queries = int(included.sum())
    if num_queries == 0:
        raise ValueError(
            "No query has a gallery item of its own class"
            + (" (every class has a single sample)." if leave_one_out else ".")
        )
    k = _search_depth(metrics, ks, r_per_query, len(g_ids) - int(leave_one_out))
    search = knn.ExactSearch(queries if leave_one_out else gallery, metric, kernel)
    selected = np.flatnonzero(included)
    exclusions = None
    if leave_one_out:  # each selected query excludes its own row
        exclusions = knn.Exclusions([(selected, np.arange(len(queries)))])
    sums = {}
    for start, indices, _ in search.search(queries[selected], k, exclusions, chunk_size):
        rows = selected[start:start + len(indices)]
        same = (indices >= 0) & (g_ids[indices] == q_ids[rows][:, np.newaxis])
        values = ranking_metrics(same, r_per_query[rows], ks if "recall@k" in metrics else (),
                                 (1,) if "precision@1" in metrics else (),
                                 "r_precision" in metrics or "map@r" in metrics)
        for key, value in values.items():
            sums[key] = sums.get(key, 0.0) + float(np.sum(value, dtype=np.float64))
    ordered = {f"recall@{k}": sums[f"recall@{k}"] / num_queries
               for k in ks if "recall@k" in metrics}
    ordered.update({m: sums[m] / num_queries for m in METRICS[1:] if m in metrics})
    ordered["num_queries"] = num_queries
    ordered["num_excluded_queries"] = int(len(q_ids) - num_queries)
    return ordered
