"""Tests for keras_dml.index: search equals brute force after add, remove and save/load."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from keras_dml.index import Index

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _brute_force(gallery, queries, k, metric):
    """Scores by the metric's formula, ranked by a stable sort (ties to the lower row)."""
    if metric == "cosine":
        g = gallery / np.linalg.norm(gallery, axis=1, keepdims=True)
        q = queries / np.linalg.norm(queries, axis=1, keepdims=True)
        scores = q @ g.T
    elif metric == "dot":
        scores = queries @ gallery.T
    else:
        scores = -((queries[:, None, :] - gallery[None, :, :]) ** 2).sum(-1)
    order = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return order, np.take_along_axis(scores, order, 1)


def _data(seed=0, n=300, d=12, q=25):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, d)).astype(np.float32),
            rng.normal(size=(q, d)).astype(np.float32), rng.integers(0, 20, n))


@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_search_equals_brute_force_after_adds_and_removes(metric):
    gallery, queries, labels = _data()
    index = Index(metric=metric)
    first = index.add(gallery[:100], labels=labels[:100],
                      metadata=[{"row": i} for i in range(100)])
    second = index.add(gallery[100:], labels=labels[100:])
    assert first.tolist() == list(range(100)) and second[0] == 100 and len(index) == 300
    result = index.search(queries, k=7)
    order, scores = _brute_force(gallery, queries, 7, metric)
    np.testing.assert_array_equal(result.ids, order)
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(result.labels, labels[order])
    assert result.metadata[0] == [{"row": int(i)} if i < 100 else None for i in order[0]]

    removed = np.arange(0, 300, 3)
    index.remove(removed)
    keep = np.setdiff1d(np.arange(300), removed)
    result = index.search(queries, k=5)
    order, scores = _brute_force(gallery[keep], queries, 5, metric)
    np.testing.assert_array_equal(result.ids, keep[order])
    np.testing.assert_allclose(result.scores, scores, rtol=1e-5, atol=1e-4)
    new = index.add(gallery[:2] * 2.0)  # running ids continue after the largest used
    assert new.tolist() == [300, 301] and len(index) == 202


def test_ties_go_to_the_item_added_first():
    index = Index()
    vector = np.array([[1.0, 0.0]], np.float32)
    index.add(np.array([[0.0, 1.0]], np.float32), ids=[5])
    index.add(np.repeat(vector, 3, axis=0), ids=[9, 2, 7])
    assert index.search(vector, k=3).ids.tolist() == [[9, 2, 7]]


def test_match_is_the_nearest_label_or_unknown():
    index = Index()
    index.add(np.eye(3, dtype=np.float32), labels=[7, 8, 9])
    queries = np.array([[1, 0.1, 0], [0, 0, 1], [1, 1, 1]], np.float32)
    np.testing.assert_array_equal(index.match(queries, 0.9), [7, 9, -1])
    np.testing.assert_array_equal(index.match(queries, 1.0), [-1, 9, -1])  # at: a match
    words = Index()
    words.add(np.eye(2, dtype=np.float32), labels=["cat", "dog"])
    assert words.match(np.array([[1, 0], [1, 1]], np.float32), 0.9).tolist() == ["cat", ""]


@pytest.mark.slow
def test_save_and_load_in_a_new_process_search_the_same(tmp_path):
    gallery, queries, _ = _data(1)
    index = Index(metric="euclidean")
    index.add(gallery, labels=[f"c{i % 9}" for i in range(len(gallery))],
              ids=np.arange(len(gallery)) * 10, metadata=[{"i": i} for i in range(len(gallery))])
    index.remove([0, 10])
    index.save(tmp_path / "index")
    np.save(tmp_path / "queries.npy", queries)
    script = (
        "import json, sys, numpy as np\n"
        "from keras_dml.index import Index\n"
        f"index = Index.load({str(tmp_path / 'index')!r})\n"
        f"r = index.search(np.load({str(tmp_path / 'queries.npy')!r}), k=4)\n"
        "print(json.dumps({'ids': r.ids.tolist(), 'scores': r.scores.tolist(),\n"
        "  'labels': r.labels.tolist(), 'meta': r.metadata, 'len': len(index),\n"
        "  'next': index.add(np.ones((1, index.dim), 'float32')).tolist()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True,
                         text=True, env=env, timeout=300).stdout
    loaded = json.loads(out.strip().splitlines()[-1])
    here = index.search(queries, k=4)
    assert loaded["ids"] == here.ids.tolist() and loaded["labels"] == here.labels.tolist()
    np.testing.assert_allclose(loaded["scores"], here.scores, rtol=1e-6)
    assert loaded["meta"] == here.metadata and loaded["len"] == 298
    assert loaded["next"] == [2991]  # ids continue after the largest ever used
    assert sorted(os.listdir(tmp_path / "index")) == [
        "added.npy", "embeddings.npy", "ids.npy", "index.json", "labels.npy", "metadata.json"]
    for name in ("added.npy", "embeddings.npy", "ids.npy", "labels.npy"):  # plain, no objects
        assert np.load(tmp_path / "index" / name, allow_pickle=False).dtype != object


def test_saving_never_overwrites_without_being_asked(tmp_path):
    index = Index()
    index.add(np.eye(2, dtype=np.float32))
    index.save(tmp_path / "i")
    with pytest.raises(FileExistsError, match="overwrite=True"):
        index.save(tmp_path / "i")
    (tmp_path / "notes").mkdir()
    with pytest.raises(FileExistsError, match="not a saved index"):
        index.save(tmp_path / "notes", overwrite=True)
    index.add(np.eye(2, dtype=np.float32))
    index.save(tmp_path / "i", overwrite=True)
    assert len(Index.load(tmp_path / "i")) == 4
    assert sorted(os.listdir(tmp_path)) == ["i", "notes"]
    Index().save(tmp_path / "empty")
    assert len(Index.load(tmp_path / "empty")) == 0


def test_bad_input_is_a_clear_error(tmp_path):
    index = Index()
    with pytest.raises(ValueError, match="metric must be one of"):
        Index(metric="manhattan")
    with pytest.raises(ValueError, match="backend must be one of"):
        Index(backend="annoy")
    with pytest.raises(ValueError, match="index is empty"):
        index.search(np.ones((1, 3), np.float32))
    index.add(np.eye(3, dtype=np.float32), labels=[1, 2, 3])
    with pytest.raises(ValueError, match="dimension 4 but the index holds dimension 3"):
        index.add(np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match="NaN or Inf"):
        index.add(np.array([[np.nan, 0, 0]], np.float32))
    with pytest.raises(ValueError, match="ids already in the index: \\[1\\]"):
        index.add(np.eye(3, dtype=np.float32), ids=[1, 10, 11])
    with pytest.raises(ValueError, match="integer labels"):
        index.add(np.eye(3, dtype=np.float32), labels=["a", "b", "c"])
    with pytest.raises(ValueError, match="k=4 exceeds the 3 items"):
        index.search(np.ones((1, 3), np.float32), k=4)
    with pytest.raises(KeyError, match="ids not in the index: \\[42\\]"):
        index.remove([42])
    with pytest.raises(ValueError, match="metadata must be JSON-serialisable"):
        index.add(np.eye(3, dtype=np.float32), metadata=[object()] * 3)
    with pytest.raises(FileNotFoundError, match="not a saved keras_dml index"):
        Index.load(tmp_path)
    assert len(index) == 3  # failed adds left nothing behind


def test_the_index_copies_what_it_is_given():
    gallery = np.eye(3, dtype=np.float32)
    index = Index()
    index.add(gallery, labels=[0, 1, 2])
    gallery[:] = 0
    assert index.search(np.eye(3, dtype=np.float32)).labels.ravel().tolist() == [0, 1, 2]


@pytest.mark.slow  # peer reference (faiss)
@pytest.mark.parametrize("backend, options", [
    ("faiss_ivf", {"nlist": 8, "nprobe": 8}), ("faiss_hnsw", {"ef_search": 200})])
def test_faiss_backends_report_their_recall_against_exact(backend, options):
    pytest.importorskip("faiss")
    gallery, queries, labels = _data(2, n=2000, d=16, q=50)
    index = Index(metric="cosine", backend=backend, **options)
    index.add(gallery, labels=labels)
    # Scanning every IVF cell / a wide HNSW beam is exact on this small gallery.
    assert index.recall_vs_exact(queries, k=10) == 1.0
    order, scores = _brute_force(gallery, queries, 10, "cosine")
    result = index.search(queries, k=10)
    np.testing.assert_array_equal(result.ids, order)
    np.testing.assert_allclose(result.scores, scores, atol=1e-5)
    narrow = Index(backend="faiss_ivf", nlist=64, nprobe=1)
    narrow.add(gallery)
    recall = narrow.recall_vs_exact(queries, k=10)
    assert 0.0 < recall < 1.0  # one cell of 64 misses neighbours, and the index says so
    index.remove(np.arange(0, 2000, 2))  # rebuilt after a change
    result = index.search(queries, k=3)
    order, _ = _brute_force(gallery[1::2], queries, 3, "cosine")
    np.testing.assert_array_equal(result.ids, 1 + 2 * order)
    assert Index(backend="exact").backend == "exact"
    with pytest.raises(ValueError, match="Unknown faiss_hnsw options \\['nprobe'\\]"):
        Index(backend="faiss_hnsw", nprobe=3)


def test_from_model_embeds_a_dataset(tmp_path):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(5)])
    x = np.random.default_rng(0).random((23, 4, 4, 1)).astype(np.float32)
    y = np.arange(23) % 4
    index = Index.from_model(model, tf.data.Dataset.from_tensor_slices((x, y)).batch(8))
    np.testing.assert_allclose(index.embeddings, model.predict(x, verbose=0), atol=1e-5)
    np.testing.assert_array_equal(index.labels, y)
    unlabelled = Index.from_model(model, x, batch_size=10, verbose=0)
    assert len(unlabelled) == 23 and set(unlabelled.labels) == {-1}


@pytest.mark.parametrize("kernel", ["numpy", "tensorflow", "faiss"])
@pytest.mark.parametrize("metric", ["dot", "euclidean"])
def test_each_exact_kernel_is_served_by_what_it_names(metric, kernel, monkeypatch):
    """Small integer embeddings: every kernel's float32 scores are exact, and tie."""
    from keras_dml.evaluation import knn
    from keras_dml.index import backends

    if kernel != "numpy":
        pytest.importorskip(kernel)
    served, scan = [], knn.ExactSearch._scan

    def recorded(self, *args):
        served.append(self.kernel)
        return scan(self, *args)

    monkeypatch.setattr(knn.ExactSearch, "_scan", recorded)
    gallery, queries, _ = (np.round(2 * x) for x in _data(5, n=500, d=8, q=30))
    positions, _ = backends.Exact(metric, kernel).search(gallery, queries, 9)
    order, _ = _brute_force(gallery, queries, 9, metric)
    np.testing.assert_array_equal(positions, order)
    assert served == [kernel]


def test_from_model_refuses_a_training_stream_at_once_and_takes_steps():
    import keras

    from keras_dml.data import class_balanced_batches
    from keras_dml.inference import embed

    x = np.random.default_rng(0).normal(size=(24, 4)).astype("float32")
    stream = class_balanced_batches((x, np.repeat(np.arange(6), 4)), 3, 2, seed=0)
    embedder = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    with pytest.raises(ValueError, match=r"data is an infinite.*evaluation_batches\("):
        Index.from_model(embedder, stream, verbose=0)
    embedded = embed(embedder, stream, steps=2)
    assert embedded.embeddings.shape == (12, 3) and embedded.labels.shape == (12,)


def test_from_model_prepares_image_files_as_the_model_records(tmp_path):
    import keras
    import tensorflow as tf

    from keras_dml.data import Preprocessing, evaluation_batches
    from keras_dml.models import DMLModel

    rng = np.random.default_rng(0)
    paths = []
    for i in range(6):  # 60 x 40 photos: resizing to 20 or to 37 gives other crops
        paths.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(rng.integers(0, 255, (60, 40, 3), np.uint8)))
    inputs = keras.Input((16, 16, 3))
    model = DMLModel(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)))
    model.preprocessing = Preprocessing(image_size=16, resize_size=20)  # as fit records it
    labels = np.arange(6) % 2
    index = Index.from_model(model.embedder(), (paths, labels), verbose=0)
    expected = model.predict(evaluation_batches((paths, labels), model.preprocessing), verbose=0)
    np.testing.assert_allclose(index.embeddings, expected, atol=1e-5)
    plain = keras.Model(model.input, model.output)  # records nothing: keras-dml train's
    with pytest.warns(UserWarning, match=r"records no preprocessing, so image files are "
                      r"embedded as keras-dml train prepares them for a 16 px input: resize "
                      r"to 18 x 18, centre crop 16"):
        assumed = Index.from_model(plain, (paths, labels), verbose=0)
    assert np.abs(assumed.embeddings - expected).max() > 1e-3
