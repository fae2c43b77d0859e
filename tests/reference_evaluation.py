"""Slow, obvious NumPy references for keras_dml.evaluation (one query at a time)."""

import numpy as np


def similarity(queries, references, metric):
    q = np.asarray(queries, np.float64)
    r = np.asarray(references, np.float64)
    if metric == "cosine":
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        r = r / np.maximum(np.linalg.norm(r, axis=1, keepdims=True), 1e-12)
    if metric == "euclidean":
        return -((q[:, None, :] - r[None, :, :]) ** 2).sum(-1)
    return q @ r.T


def ranking(scores_row, exclude=None):
    """Reference indices by decreasing score, ties to the lower index."""
    order = [j for j in np.argsort(-scores_row, kind="stable") if j != exclude]
    return np.array(order, dtype=np.int64)


def retrieval_metrics(queries, query_labels, references=None, reference_labels=None,
                      ks=(1, 2, 4, 8), metric="cosine"):
    loo = references is None
    if loo:
        references, reference_labels = queries, query_labels
    query_labels = list(np.asarray(query_labels).reshape(-1))
    reference_labels = list(np.asarray(reference_labels).reshape(-1))
    scores = similarity(queries, references, metric)
    sums = {f"recall@{k}": 0.0 for k in ks}
    sums.update({"precision@1": 0.0, "r_precision": 0.0, "map@r": 0.0})
    counted = excluded = 0
    for i, label in enumerate(query_labels):
        order = ranking(scores[i], exclude=i if loo else None)
        relevant = [reference_labels[j] == label for j in order]
        r = sum(relevant)
        if r == 0:
            excluded += 1
            continue
        counted += 1
        for k in ks:
            sums[f"recall@{k}"] += float(any(relevant[:k]))
        sums["precision@1"] += float(relevant[0])
        sums["r_precision"] += sum(relevant[:r]) / r
        average_precision = 0.0
        for position in range(r):
            if relevant[position]:
                average_precision += sum(relevant[: position + 1]) / (position + 1)
        sums["map@r"] += average_precision / r
    result = {key: value / counted for key, value in sums.items()}
    result["num_queries"] = counted
    result["num_excluded_queries"] = excluded
    return result


def nearest_neighbors(queries, references=None, k=1, metric="cosine"):
    loo = references is None
    scores = similarity(queries, queries if loo else references, metric)
    return np.stack([ranking(scores[i], i if loo else None)[:k] for i in range(len(queries))])
