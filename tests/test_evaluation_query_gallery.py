"""keras_dml.evaluation.query_gallery: query/gallery evaluation, exclusions, per-class tables."""

import csv

import numpy as np
import pytest

from keras_dml.evaluation import retrieval_metrics
from keras_dml.evaluation.query_gallery import retrieval_report


def _clusters(seed, n, classes=6, d=8, noise=0.9):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    centres = rng.normal(size=(classes, d))
    return (centres[labels] + noise * rng.normal(size=(n, d))).astype("float32"), labels


def _brute_ap(query, label, gallery, labels, excluded=()):
    """AP over the full ranking by sorting every score (pessimistic ties)."""
    g = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
    s = g @ (query / np.linalg.norm(query))
    keep = np.setdiff1d(np.arange(len(g)), excluded)
    s, rel = s[keep], labels[keep] == label
    precisions = [np.sum(rel & (s >= v)) / np.sum(s >= v) for v in sorted(s[rel], reverse=True)]
    hits = np.arange(1, rel.sum() + 1)
    ranks = np.array([np.sum(s >= v) for v in sorted(s[rel], reverse=True)])
    assert len(precisions) == len(hits)
    return np.mean(hits / ranks)


@pytest.mark.parametrize("chunk_size", [None, 7])
def test_leave_one_out_matches_retrieval_metrics_and_brute_force_ap(chunk_size):
    emb, labels = _clusters(0, 90)
    report = retrieval_report(emb, labels, ks=(1, 4), chunk_size=chunk_size)
    expected = retrieval_metrics(emb, labels, ks=(1, 4))
    for key in ("recall@1", "recall@4", "r_precision", "map@r"):
        assert report.metrics[key] == pytest.approx(expected[key], abs=1e-12)
    aps = [_brute_ap(emb[i], labels[i], emb, labels, [i]) for i in range(len(emb))]
    assert report.metrics["map"] == pytest.approx(np.mean(aps), abs=1e-9)
    assert 0 < report.metrics["map"] < 1
    assert not np.any(report.top == report.evaluated[:, None])  # never itself


def test_query_gallery_matches_retrieval_metrics_and_precision_at_k():
    gallery, g_labels = _clusters(1, 120)
    queries, q_labels = _clusters(1, 30, noise=1.2)
    report = retrieval_report(queries, q_labels, gallery, g_labels, ks=(1, 2, 8))
    expected = retrieval_metrics(queries, q_labels, gallery, g_labels, ks=(1, 2, 8))
    for key in ("recall@1", "recall@2", "recall@8", "r_precision", "map@r"):
        assert report.metrics[key] == pytest.approx(expected[key], abs=1e-12)
    precision_at_1 = report.metrics["precision@1"]
    assert precision_at_1 == pytest.approx(expected["precision@1"])
    assert report.metrics["precision@8"] == pytest.approx(report.correct()[:, :8].mean())


def test_groups_exclude_same_group_items_as_if_removed():
    gallery, g_labels = _clusters(2, 60)
    queries, q_labels = _clusters(3, 12)
    g_groups = np.arange(60) // 5
    q_groups = np.arange(12) % 12
    report = retrieval_report(queries, q_labels, gallery, g_labels, query_groups=q_groups,
                              gallery_groups=g_groups)
    for row, query in enumerate(queries):
        assert not np.any(g_groups[report.top[row]] == q_groups[row])
        excluded = np.flatnonzero(g_groups == q_groups[row])
        assert report.average_precision[row] == pytest.approx(
            _brute_ap(query, q_labels[row], gallery, g_labels, excluded))


def test_an_item_both_query_and_gallery_is_not_its_own_result():
    emb, labels = _clusters(4, 40)
    is_query = np.arange(40) < 20  # the first 20 are queries and gallery items (OML)
    report = retrieval_report(emb[is_query], labels[is_query], emb, labels,
                              query_ids=np.arange(40)[is_query], gallery_ids=np.arange(40))
    loo = retrieval_report(emb, labels)
    assert not np.any(report.top == report.evaluated[:, None])
    np.testing.assert_array_equal(report.top, loo.top[:20])


def test_per_class_table_confused_pairs_and_worst_queries(tmp_path):
    # class 2 sits on top of class 1: its queries find class 1
    emb = np.array([[1, 0], [1, 0.05], [0, 1], [0.02, 1], [0.01, 1], [-1, 0], [-1, 0.1]],
                   "float32")
    labels = np.array([0, 0, 1, 1, 2, 3, 3])
    report = retrieval_report(emb, labels, ks=(1,))
    table = report.per_class((1,))
    assert table[0]["class"] == 1 and table[0]["recall@1"] < 1
    assert {row["class"] for row in table} == {0, 1, 3}  # 2 has no other item: excluded
    assert report.metrics["num_excluded_queries"] == 1
    assert report.confused_pairs()[0][:2] == (1, 2)
    worst = report.worst_queries(2)
    assert all(report.correct()[w, 0] == 0 for w in worst)
    path = tmp_path / "per_class.csv"
    report.write_per_class_csv(path, ks=(1, 2))
    rows = list(csv.DictReader(open(path)))
    assert rows[0].keys() >= {"class", "queries", "gallery", "recall@1", "map@r", "map"}


def test_rerank_in_evaluation_keeps_exclusions_and_bad_input_is_named():
    emb, labels = _clusters(5, 60)
    for method in ("qe", "dba", "k_reciprocal"):
        report = retrieval_report(emb, labels, rerank=method)
        assert not np.any(report.top == report.evaluated[:, None]), method
        assert 0 < report.metrics["recall@1"] <= 1
    with pytest.raises(ValueError, match="query_groups must have one value per item"):
        retrieval_report(emb, labels, emb, labels, query_groups=[1, 2], gallery_groups=labels)
    with pytest.raises(ValueError, match="both the queries and the gallery"):
        retrieval_report(emb, labels, emb, labels, query_groups=labels)
    with pytest.raises(ValueError, match="dimension"):
        retrieval_report(emb, labels, emb[:, :3], labels)


class _Reversed:
    """A re-ranker that reverses the exact top list: mAP must count the list as given."""

    def rerank(self, gallery, queries, k, rows):
        ids, scores = gallery.search(queries, k, rows)
        return ids[:, ::-1], scores[:, ::-1]


def test_map_after_rerank_ranks_the_list_then_the_rest_in_order():
    emb, labels = _clusters(6, 48)
    plain = retrieval_report(emb, labels, ks=(1,))
    reversed_ = retrieval_report(emb, labels, ks=(1,), rerank=_Reversed())
    width = 10  # max(ks, R, SHOWN)
    g = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    for row in range(3):
        s = g @ g[row]
        s[row] = -np.inf
        order = np.argsort(-s, kind="stable")[:-1]
        ranking = np.concatenate([order[:width][::-1], order[width:]])
        relevant = labels[ranking] == labels[row]
        hits = np.flatnonzero(relevant) + 1
        expected = np.mean(np.arange(1, len(hits) + 1) / hits)
        assert reversed_.average_precision[row] == pytest.approx(expected)
    assert reversed_.metrics["recall@1"] < plain.metrics["recall@1"]


def _one_query_tied_at_the_end():
    """13 one-hot gallery items; the query's scores fall from item 0 to 9, and items
    10 (a negative), 11 and 12 (its two positives) tie last."""
    query = np.array([[20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 1, 1, 1]], "float32")
    return query, [0], np.eye(13, dtype="float32"), np.array([1] * 11 + [0, 0])


@pytest.mark.parametrize("ks", [(1,), (12,), (1, 2, 4, 8), (13,)])
def test_map_ranks_ties_beyond_the_list_by_index_whatever_the_ks(ks):
    report = retrieval_report(*_one_query_tied_at_the_end(), ks=ks)
    # lower index first: the negative at rank 11, the positives at 12 and 13
    assert report.metrics["map"] == pytest.approx((1 / 12 + 2 / 13) / 2, abs=1e-15)


def test_r_metrics_are_not_capped_by_another_querys_exclusions():
    """Two perfect rankings; the second query excludes 4 of the 6 items (its group)."""
    gallery = np.array([[1, 0]] * 3 + [[0, 1]] * 3, "float32") + 1e-3 * np.arange(6)[:, None]
    report = retrieval_report(np.eye(2, dtype="float32"), [0, 1], gallery, [0, 0, 0, 1, 1, 1],
                              query_groups=[5, 7], gallery_groups=[7, 7, 7, 7, 8, 9], ks=(1,))
    for key in ("recall@1", "r_precision", "map@r", "map"):
        assert report.metrics[key] == 1.0, key
    assert report.top[1, :2].tolist() == [4, 5] and (report.top[1, 2:] == -1).all()
    assert report.correct()[1].tolist() == [True, True, False, False, False, False]


@pytest.mark.parametrize("kernel", ["numpy", "tensorflow", "faiss"])
def test_identical_embeddings_follow_the_lower_index_rule_where_the_matmul_rounds_by_column(
        kernel, monkeypatch):
    """Leave-one-out on 20 rows made of 3 distinct vectors. The NumPy matmul (the search
    of kernel="numpy", and the scores of mAP with every kernel) is made to round a
    score up by one ulp in every odd column, as a BLAS may round two copies of one
    row differently: the copies are scored as one row, so the rule holds anyway, and
    both metric functions agree with the exact-tie reference."""
    import reference_evaluation as reference
    from keras_dml.evaluation import knn

    if kernel != "numpy":
        pytest.importorskip(kernel)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 16)).astype("float32")[rng.integers(0, 3, 20)]
    labels = rng.integers(0, 4, 20)
    scores = knn.ExactSearch._numpy_scores

    def rounding_by_column(self, queries):
        out = scores(self, queries)
        out[:, 1::2] = np.nextafter(out[:, 1::2], np.float32(np.inf))
        return out

    monkeypatch.setattr(knn.ExactSearch, "_numpy_scores", rounding_by_column)
    expected = reference.retrieval_metrics(x, labels, ks=(1, 2))
    metrics = retrieval_metrics(x, labels, ks=(1, 2), kernel=kernel)
    report = retrieval_report(x, labels, ks=(1, 2), kernel=kernel).metrics
    for key in ("recall@1", "recall@2", "r_precision", "map@r"):
        assert metrics[key] == pytest.approx(expected[key], abs=1e-15), key
        assert report[key] == pytest.approx(expected[key], abs=1e-15), key
    assert metrics["precision@1"] == report["precision@1"]
    order = reference.nearest_neighbors(x, None, 19, "cosine")
    np.testing.assert_array_equal(retrieval_report(x, labels, ks=(1,), kernel=kernel).top,
                                  order[:, :10])
