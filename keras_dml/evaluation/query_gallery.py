"""Query / gallery retrieval evaluation with per-query and per-class results.

`retrieval_report` ranks every query against a gallery (or, without one, against
the other queries, leave-one-out) chunk by chunk, so memory stays bounded by
the gallery itself plus one chunk of scores, and returns a `RetrievalReport`:
the metrics (Recall@K, Precision@K, MAP@R, mAP), each query's average precision
and top results (what `keras_dml.plots.failures` and the HTML run report show),
the per-class table and the most confused class pairs.

Exclusion: a gallery item is never a result of a query that is the same item
(leave-one-out, or equal `query_ids` / `gallery_ids`, as when one image is both
a query and a gallery item) or of the same group (equal `query_groups` /
`gallery_groups`: the same product photographed twice, one camera sequence;
Open Metric Learning's `sequence` column).
"""

import collections
import csv
import dataclasses

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.evaluation import knn, retrieval
from keras_dml.evaluation import rerank as reranking
from keras_dml.evaluation.rerank import without_self

__all__ = ["ArrayGallery", "RetrievalReport", "retrieval_report"]

_SCORE_BUDGET = 2**23  # float32 scores per chunk (32 MB; with sort keys and masks ~130 MB)
SHOWN = 10  # top results kept per query for figures and reports


@dataclasses.dataclass
class RetrievalReport:
    """Results of `retrieval_report`.

    Attributes:
        metrics: "recall@K" and "precision@K" for each K, "r_precision", "map@r",
            "map" (floats in [0, 1]), "num_queries" and "num_excluded_queries" (ints).
        query_labels, gallery_labels: the labels as given.
        evaluated: int64 positions of the evaluated queries (their class has a
            gallery item they may find).
        average_precision: float64, per evaluated query (its AP over the whole
            ranking; with re-ranking, the re-ranked list then the other items).
        map_at_r: float64, per evaluated query.
        top: int32 (evaluated, <= SHOWN) gallery positions of each query's best
            results, best first (query positions under leave-one-out); -1 past the
            last result of a query that excludes most of the gallery.
        top_scores: float32, as `top`.
    """

    metrics: dict
    query_labels: np.ndarray
    gallery_labels: np.ndarray
    evaluated: np.ndarray
    average_precision: np.ndarray
    map_at_r: np.ndarray
    top: np.ndarray
    top_scores: np.ndarray

    def correct(self):
        """bool (evaluated, shown): whether each shown result shares the query's class
        (False where a query has fewer results: `top` is -1 there)."""
        return (self.top >= 0) & (self.gallery_labels[self.top]
                                  == self.query_labels[self.evaluated][:, None])

    def per_class(self, ks=(1,)):
        """One dict per query class: "class", "queries", "gallery", "recall@K" for
        each K, "map@r", "map"; lowest Recall@1 first."""
        labels = self.query_labels[self.evaluated]
        correct = self.correct()
        gallery_counts = collections.Counter(self.gallery_labels.tolist())
        rows = []
        for label in np.unique(labels):
            mine = labels == label
            row = {"class": label.item() if hasattr(label, "item") else label,
                   "queries": int(mine.sum()), "gallery": gallery_counts[label.item()]}
            for k in ks:
                row[f"recall@{k}"] = float(correct[mine, :k].any(axis=1).mean())
            row["map@r"] = float(self.map_at_r[mine].mean())
            row["map"] = float(self.average_precision[mine].mean())
            rows.append(row)
        return sorted(rows, key=lambda r: (r[f"recall@{ks[0]}"], r["map@r"]))

    def confused_pairs(self, limit=10):
        """`[(class_a, class_b, count)]`: unordered class pairs most often confused at
        rank 1 (a query of one class whose best result is of the other), most first."""
        labels = self.query_labels[self.evaluated].tolist()
        found = self.gallery_labels[self.top[:, 0]].tolist()
        pairs = collections.Counter(tuple(sorted((a, b), key=str))
                                    for a, b in zip(labels, found) if a != b)
        return [(a, b, n) for (a, b), n in pairs.most_common(limit)]

    def worst_queries(self, count=8):
        """Positions in `evaluated` of the `count` queries of lowest AP (ties: lower
        Recall@1 first, then query order)."""
        hit = self.correct()[:, 0]
        return np.lexsort((np.arange(len(hit)), hit, self.average_precision))[:count]

    def write_per_class_csv(self, path, ks=(1, 2, 4, 8)):
        """Writes `per_class(ks)` as a CSV file (lowest Recall@1 first)."""
        ks = tuple(k for k in ks if k <= self.top.shape[1])
        rows = self.per_class(ks)
        with open(path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)


class ArrayGallery:
    """Gallery embeddings in memory as a re-ranker's gallery
    (`keras_dml.evaluation.rerank`), honouring each query row's exclusions.

    Args:
        search: the gallery's `knn.ExactSearch`.
        exclusions: a `knn.Exclusions` over the evaluated queries, or None.
        size: results every query may have (its exclusions left out).
    """

    def __init__(self, search, exclusions, size):
        self.exact, self.exclusions, self.metric = search, exclusions, search.metric
        self.size = size

    def search(self, vectors, k, rows=None):
        """Top-k gallery positions of `vectors`, the items excluded for the query
        `rows` (positions in the evaluated queries) left out."""
        exclusions = None if rows is None or self.exclusions is None else \
            self.exclusions.take(rows)
        parts = list(self.exact.search(np.asarray(vectors, np.float32), k, exclusions))
        return (np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]))

    def embeddings(self, ids):
        return self.exact.gallery[np.asarray(ids)]

    def neighbours(self, ids, n):
        found, scores = self.search(self.embeddings(ids), min(n + 1, self.exact.size))
        return without_self(ids, found, scores, n)


def _keys(values, count, name):
    if values is None:
        return None
    values = np.asarray(values)
    if values.shape != (count,):
        raise ValueError(f"{name} must have one value per item ({count}), got shape "
                         f"{values.shape}.")
    return values


def retrieval_report(query_embeddings, query_labels, gallery_embeddings=None,
                     gallery_labels=None, *, query_ids=None, gallery_ids=None,
                     query_groups=None, gallery_groups=None, ks=(1, 2, 4, 8),
                     metric="cosine", rerank=None, chunk_size=None, kernel="auto"):
    """Retrieval metrics of queries searched in a gallery, per query and per class.

    Each query is ranked against every gallery item it is not excluded from (see
    the module: same item, same group; without a gallery, leave-one-out on the
    queries), by the exact search of `keras_dml.evaluation.knn` (ties to the lower
    gallery index), and scored by the metric core of
    `keras_dml.evaluation.retrieval`: Recall@K, "precision@1", "r_precision" and
    "map@r" equal `retrieval_metrics`' with the same kernel. Memory: the gallery,
    plus `chunk_size` x gallery scores (default: 2**23 scores, 32 MB) with their
    sort keys, plus 10 results per query.

    Args:
        query_embeddings: float (Q, d).
        query_labels: (Q,) class ids (any comparable values).
        gallery_embeddings: float (N, d). Defaults to None: leave-one-out.
        gallery_labels: (N,), with `gallery_embeddings`.
        query_ids, gallery_ids: item ids; a query is not searched among gallery
            items of its own id. Defaults to None.
        query_groups, gallery_groups: group ids; a query is not searched among
            gallery items of its group. Defaults to None.
        ks: the K of Recall@K and Precision@K. Defaults to (1, 2, 4, 8).
        metric: "cosine" (default), "dot" or "euclidean".
        rerank: a re-ranker of `keras_dml.evaluation.rerank` (a name such as "qe" or
            an object). Defaults to None: the exact ranking.
        chunk_size: queries per chunk. Defaults to None (2**23 / N).
        kernel: the search kernel (see `keras_dml.evaluation.nearest_neighbors`).
            Defaults to `"auto"`.

    Returns:
        A `RetrievalReport`. Its "map" is each query's AP over the whole ranking
        (exact order; with `rerank`: the re-ranked list, then the other items in
        their exact order), averaged: it depends on no K.

    Examples:
        >>> emb = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.1, 0.9]], "float32")
        >>> retrieval_report(emb, [0, 0, 1, 1], ks=(1,)).metrics["recall@1"]
        1.0
    """
    _, ks = retrieval.check_metrics(("recall@k",), ks)
    metric = validation.check_search_metric(metric)
    queries = validation.embedding_array(query_embeddings, "query_embeddings")
    q_labels = validation.label_array(query_labels, len(queries), "query_labels")
    leave_one_out = gallery_embeddings is None
    if leave_one_out:
        if gallery_labels is not None or gallery_ids is not None or gallery_groups is not None:
            raise ValueError("gallery labels, ids or groups given without gallery_embeddings.")
        gallery, g_labels = queries, q_labels
        query_ids = gallery_ids = np.arange(len(queries))
        gallery_groups = query_groups
    else:
        if gallery_labels is None:
            raise ValueError("gallery_embeddings given without gallery_labels.")
        gallery = validation.embedding_array(gallery_embeddings, "gallery_embeddings")
        g_labels = validation.label_array(gallery_labels, len(gallery), "gallery_labels")
        if gallery.shape[1] != queries.shape[1]:
            raise ValueError(f"queries have dimension {queries.shape[1]} but the gallery has "
                             f"dimension {gallery.shape[1]}.")
    exclusions = _exclusions(len(queries), len(gallery), query_ids, gallery_ids, query_groups,
                             gallery_groups)
    excluded = np.zeros(len(queries), np.int64) if exclusions is None else exclusions.counts()
    search = knn.ExactSearch(gallery, metric, kernel)
    if rerank is not None:
        rerank = reranking.get(rerank)
    chunk = chunk_size or max(1, _SCORE_BUDGET // search.size)
    chunk = hyperparameters.integer_at_least("chunk_size", chunk, 1)
    available = search.size - int(excluded.max())  # results every query can have
    if ks[-1] > available:
        raise ValueError(f"recall@{ks[-1]} asks for {ks[-1]} results but a query can find "
                         f"only {available} gallery items.")
    q_ids, g_ids, _ = retrieval.class_ids(q_labels, g_labels)
    # one depth for every chunk (a kernel prepares the gallery once): K, R, SHOWN
    width = min(max(ks[-1], int(np.bincount(g_ids).max()), SHOWN), search.size)
    parts = collections.defaultdict(list)
    for start in range(0, len(queries), chunk):
        rows = np.arange(start, min(start + chunk, len(queries)))
        chunk_exclusions = None if exclusions is None else exclusions.take(rows)
        scores = search.scores(queries[rows], np.arange(len(rows)), chunk_exclusions)
        positives = (g_ids[np.newaxis, :] == q_ids[rows][:, np.newaxis]) & np.isfinite(scores)
        r = positives.sum(axis=1)
        keep = r > 0
        if not keep.any():
            continue
        rows, scores, positives, r = rows[keep], scores[keep], positives[keep], r[keep]
        if rerank is None:
            top, top_scores = _exact_top(search, queries[rows], width, exclusions, rows)
        else:
            top, top_scores = rerank.rerank(ArrayGallery(search, exclusions, available),
                                            queries[rows], width, rows)
        same = (top >= 0) & (g_ids[top] == q_ids[rows][:, None])
        values = retrieval.ranking_metrics(same, r, ks, ks)
        values["map"] = retrieval.average_precisions(scores, positives, top)
        for key, value in values.items():
            parts[key].append(value)
        parts["evaluated"].append(rows)
        parts["top"].append(top[:, :SHOWN].astype(np.int32))
        parts["top_scores"].append(top_scores[:, :SHOWN].astype(np.float32))
    if not parts:
        raise ValueError("No query has a gallery item of its own class"
                         + (" (every class has a single sample)." if leave_one_out else "."))
    joined = {key: np.concatenate(value) for key, value in parts.items()}
    evaluated = joined["evaluated"].astype(np.int64)
    metrics = {f"recall@{k}": float(joined[f"recall@{k}"].mean()) for k in ks}
    metrics.update({f"precision@{k}": float(joined[f"precision@{k}"].mean()) for k in ks})
    metrics["r_precision"] = float(joined["r_precision"].mean())
    metrics["map@r"] = float(joined["map@r"].mean())
    metrics["map"] = float(joined["map"].mean())
    metrics["num_queries"] = int(len(evaluated))
    metrics["num_excluded_queries"] = int(len(queries) - len(evaluated))
    return RetrievalReport(metrics, q_labels, g_labels, evaluated, joined["map"],
                           joined["map@r"], joined["top"], joined["top_scores"])


def _exclusions(num_queries, num_gallery, query_ids, gallery_ids, query_groups,
                gallery_groups):
    """The `knn.Exclusions` of the ids and groups given (None when neither is)."""
    if (query_ids is None) != (gallery_ids is None) or \
            (query_groups is None) != (gallery_groups is None):
        raise ValueError("Pass ids (and groups) for both the queries and the gallery, or for "
                         "neither.")
    pairs = [(_keys(q, num_queries, q_name), _keys(g, num_gallery, g_name))
             for q, g, q_name, g_name in ((query_ids, gallery_ids, "query_ids", "gallery_ids"),
                                          (query_groups, gallery_groups, "query_groups",
                                           "gallery_groups")) if q is not None]
    return knn.Exclusions(pairs) if pairs else None


def _exact_top(search, queries, width, exclusions, rows):
    """`(top, top_scores)` of the exact search, each query's exclusions left out."""
    chunk_exclusions = None if exclusions is None else exclusions.take(rows)
    parts = list(search.search(queries, width, chunk_exclusions, chunk_size=len(queries)))
    return parts[0][1], parts[0][2]
