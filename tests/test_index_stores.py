"""One behaviour suite of `Index` on every store: exact, faiss IVF and HNSW in memory, and
Milvus Lite (FLAT, HNSW, IVF_FLAT) on a real database file, no mock.

Milvus Lite opens one database per file: the module shares one file (one collection per
test), so the suite opens it once.
"""

import datetime
import itertools
import time

import numpy as np
import pytest

from keras_dml.evaluation import calibrate
from keras_dml.index import Index

pytest.importorskip("faiss")
pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

STORES = {
    "exact": {"backend": "exact"},
    "faiss_ivf": {"backend": "faiss_ivf"},
    "faiss_hnsw": {"backend": "faiss_hnsw"},
    "milvus_flat": {"backend": "milvus"},
    "milvus_hnsw": {"backend": "milvus", "index_type": "HNSW"},
    "milvus_ivf": {"backend": "milvus", "index_type": "IVF_FLAT", "nlist": 4},
}
EXACT = ("exact", "milvus_flat")
_names = itertools.count()


@pytest.fixture(scope="module")
def lite_file(tmp_path_factory):
    return str(tmp_path_factory.mktemp("milvus") / "suite.db")


@pytest.fixture(scope="module")
def open_indexes():
    opened = []
    yield opened
    for index in opened:
        index.close()


@pytest.fixture(params=list(STORES))
def make(request, lite_file, open_indexes):
    """`make(metric="cosine")`: an empty index on the store under test."""
    options = dict(STORES[request.param])

    def make_index(metric="cosine", **more):
        if options["backend"] == "milvus":
            more = {"uri": lite_file, "collection": f"c{next(_names)}", **more}
        index = Index(metric=metric, **options, **more)
        open_indexes.append(index)
        return index

    make_index.store = request.param
    return make_index


def _clusters(seed=0, classes=8, per_class=25, d=16, spread=0.35):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(classes, d))
    labels = np.repeat(np.arange(classes), per_class)
    x = centres[labels] + spread * rng.normal(size=(len(labels), d))
    return x.astype(np.float32), labels


def _brute_force(gallery, queries, k, metric):
    if metric == "cosine":
        gallery = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
        queries = queries / np.linalg.norm(queries, axis=1, keepdims=True)
    if metric == "euclidean":
        scores = -((queries[:, None, :] - gallery[None, :, :]) ** 2).sum(-1)
    else:
        scores = queries @ gallery.T
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, 1)


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_search_scores_are_the_metric_similarity_on_every_store(make, metric):
    x, labels = _clusters()
    queries = x[::10] + 0.05
    index = make(metric)
    index.add(x[:100], labels=labels[:100])
    index.add(x[100:], labels=labels[100:])
    result = index.search(queries, k=5)
    order, scores = _brute_force(x, queries, 5, metric)
    if make.store in EXACT:  # the exact order, the same similarity
        np.testing.assert_array_equal(result.ids, order)
        np.testing.assert_allclose(result.scores, scores, rtol=1e-4, atol=1e-4)
    else:  # approximate: high recall, and each returned item's true similarity
        assert index.recall_vs_exact(queries, k=5) >= 0.9
        rows = np.arange(len(queries))[:, None]
        true = _brute_force(x, queries, len(x), metric)
        lookup = np.empty_like(true[1])
        lookup[rows, true[0]] = true[1]
        np.testing.assert_allclose(result.scores, lookup[rows, result.ids], rtol=1e-4,
                                   atol=1e-4)
    np.testing.assert_array_equal(result.labels, labels[result.ids])


def test_ids_labels_metadata_upsert_remove_and_get(make):
    x, labels = _clusters()
    names = np.array([f"class-{c}" for c in labels])
    ids = np.array([f"img/{i:03d}.jpg" for i in range(len(x))])
    index = make()
    returned = index.add(x, labels=names, ids=ids, metadata=[{"row": i} for i in range(len(x))])
    assert returned.tolist() == ids.tolist() and len(index) == len(x)
    result = index.search(x[:3], k=1)
    assert result.ids[:, 0].tolist() == ids[:3].tolist()
    assert result.labels[:, 0].tolist() == names[:3].tolist()
    assert [m[0] for m in result.metadata] == [{"row": 0}, {"row": 1}, {"row": 2}]
    np.testing.assert_allclose(index.get_embeddings(ids[[5, 2]]), x[[5, 2]], rtol=1e-6)
    assert index.contains([ids[4], "img/none.jpg"]).tolist() == [True, False]
    assert index.ids.tolist() == ids.tolist() and index.labels.tolist() == names.tolist()
    assert index.metadata[:2] == [{"row": 0}, {"row": 1}]
    np.testing.assert_allclose(index.embeddings, x, rtol=1e-6)  # in the order added

    # upsert moves item 0 onto item 150's vector, with new label and metadata
    index.upsert(x[150:151], labels=["moved"], ids=ids[:1], metadata=[{"row": -1}])
    assert len(index) == len(x)
    np.testing.assert_allclose(index.get_embeddings(ids[:1]), x[150:151], rtol=1e-6)
    assert index.search(x[150:151], k=2, filter={"label": "moved"}).ids.tolist() == [[ids[0]]]

    index.remove(ids[10:20])
    index.flush()  # Milvus seals the rows (keras-dml index does at its end); memory: nothing
    assert len(index) == len(x) - 10
    assert not set(index.search(x[10:20], k=3).ids.ravel()) & set(ids[10:20])
    with pytest.raises(KeyError, match="img/010.jpg"):  # absent: named, nothing removed
        index.remove([ids[10], ids[30]])
    assert len(index) == len(x) - 10
    with pytest.raises(KeyError, match="img/011.jpg"):
        index.get_embeddings([ids[11]])


def test_bad_adds_are_refused_and_leave_the_index_unchanged(make):
    x, labels = _clusters()
    index = make()
    index.add(x[:50], labels=labels[:50])
    with pytest.raises(ValueError, match=r"distinct; repeated: \[7\]"):
        index.add(x[:3], ids=[7, 8, 7])
    with pytest.raises(ValueError, match=r"already in the index: \[3\].*upsert"):
        index.add(x[:2], ids=[3, 99])
    with pytest.raises(ValueError, match="dimension 8 but the index holds dimension 16"):
        index.add(x[:2, :8])
    with pytest.raises(ValueError, match="integer ids"):
        index.add(x[:1], ids=["a"])
    with pytest.raises(ValueError, match="integer labels"):
        index.add(x[:1], labels=["cat"])
    assert len(index) == 50
    assert index.add(x[50:52]).tolist() == [50, 51]  # running ids go on


def test_empty_index_and_k_beyond_the_collection(make):
    x, _ = _clusters()
    index = make()
    assert len(index) == 0
    with pytest.raises(ValueError, match="empty"):
        index.search(x[:1], k=1)
    index.add(x[:4])
    with pytest.raises(ValueError, match="k=5 exceeds the 4 items"):
        index.search(x[:1], k=5)
    index.remove([0, 1, 2, 3])
    with pytest.raises(ValueError, match="empty"):
        index.match(x[:1], 0.5)


def test_filters_by_label_metadata_id_and_time_added(make):
    x, labels = _clusters()
    index = make()
    index.add(x[:100], labels=labels[:100],
              metadata=[{"year": 2000 + i % 30, "path": f"p{i}"} for i in range(100)])
    time.sleep(0.05)
    after = datetime.datetime.now()
    time.sleep(0.05)
    index.add(x[100:], labels=labels[100:], metadata=[None] * 100)
    queries = x[::7]

    def brute(mask, k):
        rows = np.flatnonzero(mask)
        order, _ = _brute_force(x[rows], queries, k, "cosine")
        return rows[order]

    def check(filter, mask, k=4):
        result = index.search(queries, k=k, filter=filter)
        expected = brute(mask, min(k, int(mask.sum())))
        if make.store in EXACT or index.backend.startswith("faiss"):  # filtered: exact
            np.testing.assert_array_equal(result.ids, expected)
        else:
            found = [np.intersect1d(a, b).size for a, b in zip(result.ids, expected)]
            assert np.mean(found) / expected.shape[1] >= 0.9
            assert np.all(mask[result.ids])
        return result

    check({"label": [1, 6]}, np.isin(labels, [1, 6]))
    check({"label": {"not in": [0, 1, 2]}}, ~np.isin(labels, [0, 1, 2]))
    year = np.array([2000 + i % 30 if i < 100 else -1 for i in range(200)])
    check({"year": {">=": 2020, "<": 2025}}, (year >= 2020) & (year < 2025))
    check({"year": 2003, "label": 0}, (year == 2003) & (labels == 0))
    check({"added": {">": after}}, np.arange(200) >= 100)
    check({"id": [5, 17, 180]}, np.isin(np.arange(200), [5, 17, 180]), k=3)
    check({"path": "p42"}, np.arange(200) == 42, k=3)  # k capped at the one item passing
    # Membership on metadata (Milvus takes `in` on fields only: spelled out on JSON paths).
    check({"year": [2003, 2011]}, np.isin(year, [2003, 2011]), k=3)
    check({"year": {"not in": [2003, 2011]}}, (year >= 0) & ~np.isin(year, [2003, 2011]))
    check({"year": {"not in": []}}, year >= 0)
    assert index.search(queries, k=3, filter={"year": []}).ids.shape == (len(queries), 0)
    paths = np.array([f"p{i}" if i < 100 else "" for i in range(200)])
    check({"path": {"in": ["p1", "p2", "p99"]}}, np.isin(paths, ["p1", "p2", "p99"]), k=3)
    empty = index.search(queries, k=3, filter={"year": 1990})
    assert empty.ids.shape == (len(queries), 0) and empty.scores.shape == (len(queries), 0)
    assert index.match(queries[:2], 0.0, filter={"year": 1990}).tolist() == [-1, -1]
    with pytest.raises(ValueError, match="unknown field 'yaer'.*'year'"):
        index.search(queries, k=3, filter={"yaer": 2020})
    with pytest.raises(ValueError, match="unknown operator '=>'"):
        index.search(queries, k=3, filter={"year": {"=>": 2020}})
    if index.backend == "milvus":  # Milvus' own expression is accepted
        raw = index.search(queries, k=4, filter="label in [1, 6]")
        np.testing.assert_array_equal(raw.ids, index.search(queries, 4, {"label": [1, 6]}).ids)
        with pytest.raises(ValueError, match="unknown field 'nofield'"):
            index.search(queries, k=3, filter="nofield > 1")
    else:
        with pytest.raises(ValueError, match="Milvus expression, for backend='milvus'"):
            index.search(queries, k=3, filter="label in [1, 6]")


def test_recall_vs_exact_on_every_store(make):
    x, labels = _clusters(seed=3, classes=20, per_class=30, spread=0.8)
    index = make()
    index.add(x, labels=labels)
    recall = index.recall_vs_exact(x[::9] + 0.01, k=10)
    assert recall == 1.0 if make.store in EXACT else 0.8 <= recall <= 1.0


def test_match_decides_as_the_exact_index_at_a_calibrated_threshold(make):
    gallery, labels = _clusters(seed=1, classes=12, per_class=20, spread=0.6)
    calibration, calibration_labels = _clusters(seed=2, classes=12, per_class=10, spread=0.6)
    threshold = calibrate(calibration, calibration_labels, value=0.9).threshold
    rng = np.random.default_rng(4)
    queries = np.concatenate([gallery[::8] + 0.4 * rng.normal(size=(30, 16)),  # known classes
                              3 * rng.normal(size=(30, 16))]).astype(np.float32)  # strangers
    exact = Index()
    exact.add(gallery, labels=labels)
    index = make()
    index.add(gallery, labels=labels)
    expected = exact.match(queries, threshold)
    assert 0 < np.sum(expected == -1) < len(queries)  # both decisions occur
    np.testing.assert_array_equal(index.match(queries, threshold), expected)


def test_re_ranking_runs_on_every_store(make):
    x, labels = _clusters(seed=5)
    exact = Index()
    exact.add(x, labels=labels)
    index = make()
    index.add(x, labels=labels)
    queries = x[::20] + 0.05
    for method in ("qe", "dba", "k_reciprocal"):
        result = index.search(queries, k=5, rerank=method)
        assert result.ids.shape == (len(queries), 5)
        if make.store in EXACT:
            np.testing.assert_array_equal(result.ids, exact.search(queries, 5, rerank=method).ids)
