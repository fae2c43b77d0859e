"""Tests for keras_dml.evaluation: exact kNN, retrieval metrics, NMI, evaluate_retrieval."""


import keras
import numpy as np
import pytest
import tensorflow as tf

import reference_evaluation as reference
from keras_dml.evaluation import (
    embed_dataset,
    evaluate_retrieval,
    knn,
    knn_tensorflow,
    nearest_neighbors,
    nmi,
    retrieval_metrics,
)

SEARCH_METRICS = ("cosine", "dot", "euclidean")
FAISS = pytest.param("faiss", marks=pytest.mark.requires("faiss"))
PML_NAMES = {
    "precision@1": "precision_at_1",
    "r_precision": "r_precision",
    "map@r": "mean_average_precision_at_r",
}


def random_data(n=400, d=8, classes=25, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype("float32"), rng.integers(0, classes, n)


def tied_data(n=400, classes=25, seed=0):
    """Integer embeddings in {-1, 0, 1}^3 (27 distinct points): scores tie everywhere."""
    rng = np.random.default_rng(seed)
    return rng.integers(-1, 2, size=(n, 3)).astype("float32"), rng.integers(0, classes, n)


def duplicated_data(seed=0):
    """Random points, then 80 exact copies, half of them with a different label."""
    x, y = random_data(300, seed=seed)
    copies = np.arange(0, 160, 2)
    labels = y[copies].copy()
    labels[::2] = (labels[::2] + 1) % 25
    return np.concatenate([x, x[copies]]), np.concatenate([y, labels])


def unit_tied_data(n=300, seed=0):
    """Exactly unit-norm points (one-hot, and (+-0.5)^4 patterns): cosine ties are exact."""
    rng = np.random.default_rng(seed)
    one_hot = np.eye(6, dtype="float32")[rng.integers(0, 6, n // 2)]
    halves = np.zeros((n - n // 2, 6), "float32")
    halves[:, :4] = rng.choice([-0.5, 0.5], size=(n - n // 2, 4))
    return np.concatenate([one_hot, halves]), rng.integers(0, 12, n)


def assert_metrics_close(ours, expected, keys=None):
    for key in keys or expected:
        assert ours[key] == pytest.approx(expected[key], abs=1e-12), key


# ---------------------------------------------------------------- nearest neighbours


@pytest.mark.parametrize("kernel", ["tensorflow", FAISS, "numpy"])
@pytest.mark.parametrize("metric", SEARCH_METRICS)
@pytest.mark.parametrize("k, chunk_size", [(1, 64), (9, 1000), (40, 64), (40, 1000)])
def test_nearest_neighbors_match_reference(metric, k, chunk_size, kernel):
    x, _ = tied_data(500) if metric != "cosine" else unit_tied_data(500)
    expected = reference.nearest_neighbors(x, None, k, metric)
    indices, _ = nearest_neighbors(x, k=k, metric=metric, chunk_size=chunk_size, kernel=kernel)
    np.testing.assert_array_equal(indices, expected)
    expected = reference.nearest_neighbors(x[:70], x[70:], k, metric)
    indices, _ = nearest_neighbors(x[:70], x[70:], k=k, metric=metric, chunk_size=chunk_size,
                                   kernel=kernel)
    np.testing.assert_array_equal(indices, expected)


@pytest.mark.parametrize("metric", SEARCH_METRICS)
def test_two_stage_and_plain_top_k_agree_on_ties_and_duplicates(metric, monkeypatch):
    x, _ = unit_tied_data(600) if metric == "cosine" else tied_data(600)
    x = np.concatenate([x, x[:50]])  # 650 rows: the blocks need padding
    k = 12
    assert knn_tensorflow._group_size(len(x), k) == 7  # the two-stage top-k is exercised
    expected = reference.nearest_neighbors(x, None, k, metric)
    found = nearest_neighbors(x, k=k, metric=metric, kernel="tensorflow")[0]
    np.testing.assert_array_equal(found, expected)
    monkeypatch.setattr(knn_tensorflow, "_group_size", lambda width, k: 1)  # plain tf.math.top_k
    found = nearest_neighbors(x, k=k, metric=metric, kernel="tensorflow")[0]
    np.testing.assert_array_equal(found, expected)


def test_block_order_is_a_permutation():
    order = knn_tensorflow._block_order(12, 3)
    np.testing.assert_array_equal(order, [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11])


@pytest.mark.parametrize("kernel", ["tensorflow", FAISS, "numpy"])
def test_leave_one_out_excludes_self_by_index_not_by_distance(kernel):
    x = np.repeat(np.eye(3, dtype="float32"), 4, axis=0)  # every point has 3 exact copies
    indices, scores = nearest_neighbors(x, k=3, kernel=kernel)
    for i, row in enumerate(indices):
        assert i not in row
        assert sorted(row) == [j for j in range(4 * (i // 4), 4 * (i // 4) + 4) if j != i]
    np.testing.assert_allclose(scores, 1.0)


def test_scores_are_the_distances():
    x, _ = random_data(120)
    _, scores = nearest_neighbors(x[:20], x[20:], k=5, metric="euclidean")
    full = reference.similarity(x[:20], x[20:], "euclidean")
    np.testing.assert_allclose(scores, -np.sort(-full, axis=1)[:, :5], rtol=1e-4, atol=1e-4)
    _, scores = nearest_neighbors(x, k=3, metric="cosine")
    assert scores.dtype == np.float32 and np.all(scores <= 1.0 + 1e-6)


def test_results_do_not_depend_on_chunk_size():
    x, _ = random_data(151)
    base = nearest_neighbors(x, k=7, chunk_size=151)[0]
    for chunk_size in (1, 40, 5000):
        np.testing.assert_array_equal(nearest_neighbors(x, k=7, chunk_size=chunk_size)[0], base)


@pytest.mark.parametrize("references, rows", [
    (10, 2**25 // 10),  # a 128 MB score buffer
    (20_000, 1677),  # ... holds more than 1,024 queries
    (100_000, 1024),  # grown to 410 MB for 1,024 queries
    (1_000_000, 134),  # capped at 512 MB
    (2**28, 1),
])
def test_default_chunk_is_a_bounded_score_buffer_of_at_least_1024_queries(references, rows):
    assert knn._default_chunk_size(references) == rows


def test_accepts_tensors():
    x, _ = random_data(50)
    np.testing.assert_array_equal(
        nearest_neighbors(tf.constant(x), k=2)[0], nearest_neighbors(x, k=2)[0]
    )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"queries": np.full((4, 2), np.nan, "float32")}, "NaN"),
        ({"queries": np.ones(4, "float32")}, r"shape \(4,\)"),
        ({"queries": np.ones((4, 2)), "gallery": np.ones((4, 3))}, "dimension 3"),
        ({"queries": np.ones((4, 2)), "k": 4}, "k=4 exceeds the 3"),
        ({"queries": np.ones((4, 2)), "k": 0}, "k must be a positive integer"),
        ({"queries": np.ones((4, 2)), "metric": "l1"}, "'l1'"),
        ({"queries": np.ones((4, 2)), "chunk_size": -1}, "chunk_size"),
    ],
)
def test_nearest_neighbors_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        nearest_neighbors(**kwargs)


# ------------------------------------------------------------------ retrieval metrics


@pytest.mark.parametrize("data", [random_data, tied_data, duplicated_data, unit_tied_data])
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_metrics_match_numpy_reference(data, metric):
    x, y = data()
    if data in (tied_data, unit_tied_data) and metric == "cosine":
        x, y = unit_tied_data()  # cosine ties are exact only for exactly unit vectors
    assert_metrics_close(retrieval_metrics(x, y, metric=metric, chunk_size=100),
                         reference.retrieval_metrics(x, y, metric=metric))
    queries, references = slice(0, 100), slice(100, None)
    ours = retrieval_metrics(x[queries], y[queries], x[references], y[references],
                             ks=(1, 3, 10), metric=metric)
    expected = reference.retrieval_metrics(x[queries], y[queries], x[references],
                                           y[references], ks=(1, 3, 10), metric=metric)
    assert_metrics_close(ours, expected)


def test_deprecated_distance_keyword_warns_and_gives_the_metric_result():
    x, y = random_data(120)
    with pytest.warns(DeprecationWarning, match="use metric='euclidean'"):
        old = nearest_neighbors(x, k=3, distance="euclidean")
    new = nearest_neighbors(x, k=3, metric="euclidean")
    np.testing.assert_array_equal(old[0], new[0])
    np.testing.assert_array_equal(old[1], new[1])
    with pytest.warns(DeprecationWarning, match="use metric='dot'"):
        old = retrieval_metrics(x, y, distance="dot")
    assert old == retrieval_metrics(x, y, metric="dot")
    with pytest.raises(ValueError, match="Give metric= only"):
        nearest_neighbors(x, k=3, metric="cosine", distance="euclidean")


@pytest.mark.slow  # peer reference (PML, faiss)
@pytest.mark.parametrize("data", [random_data, tied_data, duplicated_data])
def test_metrics_match_pytorch_metric_learning(data):
    accuracy_calculator = pytest.importorskip("pytorch_metric_learning.utils.accuracy_calculator")
    pytest.importorskip("faiss")
    calculator = accuracy_calculator.AccuracyCalculator(
        include=tuple(PML_NAMES.values()), k="max_bin_count"
    )
    x, y = data()
    ours = retrieval_metrics(x, y, metric="euclidean")
    theirs = calculator.get_accuracy(x, y)
    for name, pml_name in PML_NAMES.items():
        assert ours[name] == pytest.approx(theirs[pml_name], abs=1e-9), name
    ours = retrieval_metrics(x[:120], y[:120], x[120:], y[120:], metric="euclidean")
    theirs = calculator.get_accuracy(x[:120], y[:120], x[120:], y[120:])
    for name, pml_name in PML_NAMES.items():
        assert ours[name] == pytest.approx(theirs[pml_name], abs=1e-9), name


def test_map_at_r_searches_as_deep_as_the_largest_class():
    x, y = random_data(300, classes=5)  # classes of ~60 >> max(ks)
    ours = retrieval_metrics(x, y, ks=(1,))
    assert_metrics_close(ours, reference.retrieval_metrics(x, y, ks=(1,)))


def test_perfect_and_known_values():
    x = np.array([[1, 0], [0.9, 0.1], [0, 1], [0.2, 0.8], [0.8, 0.6]], "float32")
    y = [0, 0, 1, 1, 1]
    result = retrieval_metrics(x, y, ks=(1, 2, 4))
    # Query 4 ranks 1, 0 (class 0) before 3, 2 (its class): it misses at 1 and 2, and
    # its R = 2 nearest hold no relevant item; every other query is perfect.
    assert result["recall@1"] == result["recall@2"] == pytest.approx(4 / 5)
    assert result["recall@4"] == 1.0
    assert result["precision@1"] == result["r_precision"] == pytest.approx(4 / 5)
    assert result["map@r"] == pytest.approx(4 / 5)
    assert result["num_queries"] == 5 and result["num_excluded_queries"] == 0
    assert all(isinstance(result[key], float) for key in ("recall@1", "r_precision", "map@r"))


def test_queries_without_reference_are_excluded_and_counted():
    x, y = random_data(200, classes=10)
    y = y.copy()
    y[:3] = [100, 101, 102]  # singleton classes: no other member to retrieve
    result = retrieval_metrics(x, y)
    assert result["num_excluded_queries"] == 3 and result["num_queries"] == 197
    assert_metrics_close(result, reference.retrieval_metrics(x, y))
    ref_labels = np.where(y[50:] == 1, 99, y[50:])  # class 1 missing from the gallery
    result = retrieval_metrics(x[:50], y[:50], x[50:], ref_labels)
    assert result["num_excluded_queries"] == int(np.sum(np.isin(y[:50], [1, 100, 101, 102])))
    with pytest.raises(ValueError, match="No query has a gallery item"):
        retrieval_metrics(x[:3], [1, 2, 3])


def test_metric_selection_and_string_labels():
    x, y = random_data(100, classes=4)
    names = np.array(["cat", "dog", "owl", "emu"])[y]
    result = retrieval_metrics(x, names, ks=(2, 1), metrics=("recall@k",))
    assert list(result) == ["recall@1", "recall@2", "num_queries", "num_excluded_queries"]
    assert result["recall@1"] == retrieval_metrics(x, y)["recall@1"]
    assert list(retrieval_metrics(x, y, metrics="map@r"))[0] == "map@r"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"query_labels": np.zeros(7)}, "7 entries"),
        ({"metrics": ("recall@k", "ndcg")}, "metrics must be"),
        ({"ks": (1, 0)}, "positive integer"),
        ({"ks": (1, 20)}, "recall@20 asks for 20 neighbours but each query has only 9"),
        ({"gallery_labels": np.zeros(10)}, "gallery_labels given without"),
        ({"gallery_embeddings": np.ones((10, 2))}, "without gallery_labels"),
        ({"query_labels": np.zeros((10, 2))}, r"shape \(N,\) or \(N, 1\)"),
    ],
)
def test_retrieval_metrics_errors(kwargs, message):
    args = {"query_embeddings": np.eye(10, 2, dtype="float32") + 1, "query_labels": np.zeros(10)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(**args)


# --------------------------------------------------------------- models and datasets


def _tiny_model():
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, use_bias=False)])


def test_evaluate_retrieval_embeds_in_batches():
    x, y = random_data(130)
    model = _tiny_model()
    embeddings = np.asarray(model.predict(x, verbose=0))
    expected = retrieval_metrics(embeddings, y)
    dataset = tf.data.Dataset.from_tensor_slices((x, y[:, None])).batch(32)
    got = evaluate_retrieval(model, dataset)
    assert got == pytest.approx(expected)
    assert evaluate_retrieval(model, (x, y), batch_size=17) == pytest.approx(expected)
    split = evaluate_retrieval(model, (x[:30], y[:30]), (x[30:], y[30:]), ks=(1,))
    assert split == pytest.approx(retrieval_metrics(embeddings[:30], y[:30], embeddings[30:],
                                                    y[30:], ks=(1,)))
    out, labels = embed_dataset(model, dataset)
    np.testing.assert_allclose(out, embeddings, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(labels, y)


def test_repeated_query_and_gallery_evaluations_do_not_warn_of_retracing(caplog):
    x, y = random_data(50)
    model = _tiny_model()
    for batch_size in (7, 9, 11, 13):  # each query and gallery: a new function, two shapes
        evaluate_retrieval(model, (x[:20], y[:20]), (x[20:], y[20:]), ks=(1,),
                           batch_size=batch_size)
    assert "retracing" not in caplog.text


def test_evaluate_retrieval_errors():
    model = _tiny_model()
    with pytest.raises(ValueError, match="tf.data.Dataset"):
        evaluate_retrieval(model, np.ones((4, 8)))
    with pytest.raises(ValueError, match="empty"):
        evaluate_retrieval(model, tf.data.Dataset.from_tensor_slices(
            (np.ones((0, 8), "float32"), np.ones(0))).batch(4))
    images = keras.Sequential([keras.Input((2, 4)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"\(batch, dim\)"):
        evaluate_retrieval(images, (np.ones((6, 2, 4), "float32"), np.zeros(6)))


# ------------------------------------------------------------------------------- NMI


def test_nmi():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(6), 20)
    centres = rng.normal(size=(6, 16)) * 10
    separated = (centres[labels] + rng.normal(size=(120, 16))).astype("float32")
    assert nmi(separated, labels) == pytest.approx(1.0)
    noise = rng.normal(size=(120, 16)).astype("float32")
    assert 0.0 <= nmi(noise, labels) < 0.4
    with pytest.raises(ValueError, match="at least 2 classes"):
        nmi(noise, np.zeros(120))


def _stream():
    """A training stream: infinite (arrays) as class_balanced_batches makes it."""
    from keras_dml.data import class_balanced_batches

    x = np.random.default_rng(0).normal(size=(24, 4)).astype("float32")
    return class_balanced_batches((x, np.repeat(np.arange(6), 4)), 3, 2, seed=0)


@pytest.mark.parametrize("make", [
    _stream,  # infinite
    lambda: _stream().filter(lambda x, y: True),  # unknown length
    lambda: tf.data.Dataset.from_generator(lambda: iter([(np.zeros((2, 4), "float32"),
                                                          np.zeros(2, "int32"))]),
                                           output_signature=(tf.TensorSpec([None, 4]),
                                                             tf.TensorSpec([None], tf.int32))),
])
def test_an_endless_or_unknown_length_dataset_is_refused_at_once_with_the_fix(make):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    for evaluate in (embed_dataset, evaluate_retrieval):
        with pytest.raises(ValueError, match=r"evaluation_batches\(.*steps=N"):
            evaluate(model, make())


def test_steps_bounds_the_evaluation_of_a_training_stream():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    embeddings, labels = embed_dataset(model, _stream(), steps=4)
    assert embeddings.shape == (24, 3) and labels.shape == (24,)
    assert "recall@1" in evaluate_retrieval(model, _stream(), steps=4, ks=(1,))


def test_deprecated_reference_keywords_warn_and_name_the_gallery_ones():
    x, y = random_data(120)
    with pytest.warns(DeprecationWarning, match="use gallery_embeddings="):
        old = retrieval_metrics(x[:20], y[:20], reference_embeddings=x[20:],
                                gallery_labels=y[20:], ks=(1, 3))
    assert old == retrieval_metrics(x[:20], y[:20], gallery_embeddings=x[20:],
                                    gallery_labels=y[20:], ks=(1, 3))
    with pytest.warns(DeprecationWarning, match="use gallery_labels="):
        assert retrieval_metrics(x[:20], y[:20], x[20:], reference_labels=y[20:],
                                 ks=(1, 3)) == old
    with pytest.warns(DeprecationWarning, match="use gallery="):
        found = nearest_neighbors(x[:20], references=x[20:], k=3)[0]
    np.testing.assert_array_equal(found, nearest_neighbors(x[:20], x[20:], k=3)[0])
    with pytest.raises(ValueError, match="Give gallery_embeddings= only"):
        retrieval_metrics(x[:20], y[:20], gallery_embeddings=x[20:],
                          reference_embeddings=x[20:], gallery_labels=y[20:])
    with pytest.raises(ValueError, match="Give gallery= only"):
        nearest_neighbors(x[:20], gallery=x[20:], references=x[20:])
    with pytest.raises(TypeError, match="multiple values for argument 'gallery'"):
        nearest_neighbors(x[:20], x[20:], references=x[20:])
