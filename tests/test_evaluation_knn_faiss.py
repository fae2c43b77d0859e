"""Exact kNN through faiss' flat index: the TensorFlow kernel's ids and tie order."""

import logging

import numpy as np
import pytest

from keras_dml import datasets
from keras_dml.evaluation import knn_tensorflow, nearest_neighbors, retrieval_metrics
from keras_dml.evaluation.knn_faiss import FlatIndex, resolve_kernel
from keras_dml.index import Index

pytest.importorskip("faiss")

METRICS = ("cosine", "dot", "euclidean")


def _both(queries, references, k, metric, **kwargs):
    return [nearest_neighbors(queries, references, k=k, metric=metric, kernel=kernel, **kwargs)
            for kernel in ("tensorflow", "faiss")]


@pytest.fixture(scope="module")
def digit_pixels():
    """The 1,797 digits as integer pixel vectors (0..16): every dot product and squared
    distance is an exact integer in float32, so both kernels score bitwise alike and
    equal scores (duplicate images, equal sums) tie everywhere."""
    splits = datasets.load("digits")
    x = np.concatenate([splits.train.images, splits.test.images]).reshape(-1, 64)
    return np.round(x * 16).astype(np.float32)


@pytest.mark.parametrize("metric", ["dot", "euclidean"])
@pytest.mark.parametrize("leave_one_out", [True, False])
def test_identical_ids_with_exact_ties_on_digits(digit_pixels, metric, leave_one_out):
    references = None if leave_one_out else digit_pixels[:900]
    (tf_ids, tf_scores), (faiss_ids, faiss_scores) = _both(digit_pixels, references, 20, metric)
    assert (tf_scores[:, 1:] == tf_scores[:, :-1]).sum() > 500  # ties are everywhere
    np.testing.assert_array_equal(faiss_ids, tf_ids)
    np.testing.assert_array_equal(faiss_scores, tf_scores)


def test_ties_straddling_the_kth_place_go_to_the_lower_index():
    """40 copies of one vector among others: k = 5 keeps the 5 lowest copies, although
    faiss must look past the few extra neighbours it fetches first."""
    rng = np.random.default_rng(0)
    gallery = rng.normal(size=(200, 8)).astype(np.float32) * 0.1
    copies = np.sort(rng.choice(200, 40, replace=False))
    gallery[copies] = 1.0
    query = np.ones((1, 8), np.float32)
    for metric in METRICS:
        found, scores = FlatIndex(gallery, metric).search(query, 5)
        np.testing.assert_array_equal(found[0], copies[:5])
        assert len(set(scores[0].tolist())) == 1
        (tf_ids, _), (faiss_ids, _) = _both(query, gallery, 5, metric)
        np.testing.assert_array_equal(faiss_ids, tf_ids)
    # Leave-one-out: a copy's own row is skipped, the next copies follow in index order.
    found, _ = nearest_neighbors(gallery, k=3, kernel="faiss")
    np.testing.assert_array_equal(found[copies[:2]], [copies[1:4], copies[[0, 2, 3]]])


@pytest.mark.parametrize("metric", METRICS)
def test_random_unit_vectors_agree_but_for_rounding(metric):
    """Without exact ties the ids are identical except where two references score
    within float rounding of each other: there both kernels name references of the
    same score (to 1e-6) at each rank."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    (tf_ids, tf_scores), (faiss_ids, faiss_scores) = _both(x[:500], x, 30, metric)
    np.testing.assert_allclose(faiss_scores, tf_scores, atol=2e-6)
    differ = tf_ids != faiss_ids
    assert differ.mean() < 1e-3

    def score(query, reference):  # in float64
        q, r = x[query].astype(np.float64), x[reference].astype(np.float64)
        return -np.sum((q - r) ** 2) if metric == "euclidean" else q @ r

    for row, rank in zip(*np.nonzero(differ)):
        assert abs(score(row, tf_ids[row, rank]) - score(row, faiss_ids[row, rank])) < 2e-6


def test_retrieval_metrics_are_equal_with_either_kernel(digit_pixels):
    labels = np.concatenate([datasets.load("digits").train.labels,
                             datasets.load("digits").test.labels + 5])
    results = [retrieval_metrics(digit_pixels, labels, metric="dot", kernel=kernel)
               for kernel in ("tensorflow", "faiss")]
    assert results[0] == results[1]


def test_kernel_choice_and_errors():
    assert resolve_kernel("auto") == "faiss"  # faiss installed, no GPU on the test machine
    assert resolve_kernel("tensorflow") == "tensorflow"
    assert resolve_kernel("numpy") == "numpy"
    with pytest.raises(ValueError, match="kernel must be one of"):
        resolve_kernel("cuda")
    with pytest.raises(ValueError, match="kernel must be one of"):
        Index(kernel="gpu")
    with pytest.raises(ValueError, match="Unknown exact options"):
        Index(nprobe=3)


def test_index_exact_kernels_agree_and_the_kernel_is_saved(tmp_path):
    rng = np.random.default_rng(2)
    gallery = np.repeat(rng.normal(size=(30, 6)).astype(np.float32), 3, axis=0)  # triples
    results = []
    for kernel in ("faiss", "tensorflow"):
        index = Index(kernel=kernel)
        index.add(gallery, labels=np.arange(90) // 3)
        results.append(index.search(gallery[::7], k=4))
    np.testing.assert_array_equal(results[0].ids, results[1].ids)
    index.save(tmp_path / "index")
    assert Index.load(tmp_path / "index").options == {"kernel": "tensorflow"}


def test_search_with_many_batch_sizes_and_ks_does_not_retrace(caplog):
    """The TensorFlow kernel is traced once: no "triggered tf.function retracing"."""
    rng = np.random.default_rng(3)
    index = Index(kernel="tensorflow")
    index.add(rng.normal(size=(700, 16)).astype(np.float32))
    knn_tensorflow._chunk.get_concrete_function()  # the one trace (its input signature)
    traces = knn_tensorflow._chunk.experimental_get_tracing_count()
    with caplog.at_level(logging.WARNING, logger="tensorflow"):
        for size in (1, 2, 3, 5, 7, 11, 13):
            for k in (1, 4, 9):
                index.search(rng.normal(size=(size, 16)).astype(np.float32), k=k)
        nearest_neighbors(rng.normal(size=(50, 16)), k=3, metric="euclidean",
                          kernel="tensorflow")  # leave-one-out, other dimension
    assert knn_tensorflow._chunk.experimental_get_tracing_count() == traces
    assert "retracing" not in caplog.text
