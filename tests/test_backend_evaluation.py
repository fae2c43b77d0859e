"""Retrieval metrics, exact kNN and RecallAtK on the running Keras backend (TensorFlow,
JAX or PyTorch): NumPy inputs, no TensorFlow in the test. Run under each KERAS_BACKEND."""

import warnings

import keras
import numpy as np
import pytest

import model_checks as checks
import reference_evaluation as reference
from keras_dml.callbacks import RecallAtK
from keras_dml.evaluation import embed_dataset, evaluate_retrieval, nearest_neighbors
from keras_dml.evaluation import retrieval_metrics
from keras_dml.evaluation.knn_faiss import faiss_module, resolve_kernel
from keras_dml.inference import inference_function

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

KERNELS = ["numpy", pytest.param("faiss", marks=pytest.mark.requires("faiss"))]


def tied_data(n=300, classes=12, seed=0):
    """Integer embeddings in {-1, 0, 1}^3: scores tie everywhere (order by index)."""
    rng = np.random.default_rng(seed)
    return rng.integers(-1, 2, size=(n, 3)).astype("float32"), rng.integers(0, classes, n)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("metric", ["cosine", "dot", "euclidean"])
def test_exact_knn_equals_brute_force_with_ties_to_the_lower_index(metric, kernel):
    x, _ = tied_data()
    if metric == "cosine":  # exactly unit rows: cosine ties are exact too
        x = np.eye(6, dtype="float32")[np.random.default_rng(1).integers(0, 6, 300)]
    for k, chunk in ((1, 64), (9, 1000), (40, 37)):
        found, _ = nearest_neighbors(x, k=k, metric=metric, chunk_size=chunk, kernel=kernel)
        np.testing.assert_array_equal(found, reference.nearest_neighbors(x, None, k, metric))
        found, _ = nearest_neighbors(x[:50], x[50:], k=k, metric=metric, chunk_size=chunk,
                                     kernel=kernel)
        np.testing.assert_array_equal(found,
                                      reference.nearest_neighbors(x[:50], x[50:], k, metric))


def test_auto_kernel_is_tensorflow_only_on_the_tensorflow_backend():
    expected = "faiss" if faiss_module() else (
        "tensorflow" if keras.backend.backend() == "tensorflow" else "numpy")
    assert resolve_kernel("auto") == expected


@pytest.mark.parametrize("kernel", KERNELS)
def test_retrieval_metrics_equal_the_numpy_reference(kernel):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(200, 8)).astype("float32"), rng.integers(0, 20, 200)
    ours = retrieval_metrics(x, y, ks=(1, 2, 4), kernel=kernel)
    expected = reference.retrieval_metrics(x, y, ks=(1, 2, 4))
    for key in ("recall@1", "recall@2", "recall@4", "precision@1", "r_precision", "map@r"):
        assert ours[key] == pytest.approx(expected[key], abs=1e-12), key


def test_embed_dataset_takes_arrays_a_py_dataset_and_a_list_of_batches():
    x, y = checks.data()
    model = checks.model()
    expected = keras.ops.convert_to_numpy(model(x, training=False))

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return x[16 * index:16 * index + 16], y[16 * index:16 * index + 16]

    batches = [(x[i:i + 10], y[i:i + 10]) for i in range(0, 64, 10)]
    for data in ((x, y), Batches(), batches):
        embeddings, labels = embed_dataset(model, data, batch_size=16)
        np.testing.assert_allclose(embeddings, expected, atol=1e-5)
        np.testing.assert_array_equal(labels, y)
    embeddings, labels = embed_dataset(model, Batches(), steps=2)
    assert embeddings.shape == (32, checks.DIM) and labels.shape == (32,)


def test_an_endless_py_dataset_or_generator_is_refused_unless_steps_bound_it():
    x, y = checks.data()

    class Endless(keras.utils.PyDataset):
        @property
        def num_batches(self):
            return None

        def __getitem__(self, index):
            return x[:16], y[:16]

    model = checks.model()
    for data in (Endless(), ((x[:16], y[:16]) for _ in range(3))):
        with pytest.raises(ValueError, match=r"evaluation_batches\(.*steps=N"):
            embed_dataset(model, data)
    embeddings, _ = embed_dataset(model, Endless(), steps=3)
    assert embeddings.shape == (48, checks.DIM)
    assert "recall@1" in evaluate_retrieval(model, Endless(), steps=3, ks=(1,))


def test_recall_at_k_logs_the_metrics_of_the_model_being_trained():
    x, y = checks.data()
    model = checks.model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=checks.OpsContrastive())
    callback = RecallAtK((x, y), ks=(1, 2), verbose=0)
    history = model.fit(x, y, batch_size=16, shuffle=False, epochs=2, verbose=0,
                        callbacks=[callback])
    assert callback.history["epoch"] == [0, 1]
    embeddings = keras.ops.convert_to_numpy(model.predict(x, verbose=0))
    expected = reference.retrieval_metrics(embeddings, y, ks=(1, 2))
    for key in ("recall@1", "recall@2", "map@r"):
        assert history.history[f"val_{key}"][-1] == pytest.approx(expected[key], abs=1e-6)


def test_recall_at_k_warns_when_the_embeddings_collapse():
    x, y = checks.data()
    inputs = keras.Input((x.shape[1],))
    model = keras.Model(inputs, keras.layers.Dense(checks.DIM, kernel_initializer="zeros",
                                                   bias_initializer="ones")(inputs))
    callback = RecallAtK((x, y), ks=(1,), verbose=0)
    callback.set_model(model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback.on_epoch_end(0, {})
    assert any("collapsed" in str(w.message) for w in caught)


class _Traced(keras.layers.Layer):
    """Doubles its input and counts the runs of its Python `call`: one per trace when
    compiled (TensorFlow, JAX), one per call when eager (PyTorch)."""

    def __init__(self):
        super().__init__()
        self.runs = 0

    def call(self, x):
        self.runs += 1
        return x * 2.0


def test_one_compiled_forward_serves_a_pass_whose_last_batch_is_short():
    traced = _Traced()
    model = keras.Sequential([keras.Input((3,)), traced, keras.layers.Dense(2)])
    x = np.random.default_rng(0).random((10, 3)).astype("float32")
    forward = inference_function(model)
    runs = traced.runs
    parts = [keras.ops.convert_to_numpy(forward(x[i:i + 4])) for i in range(0, 10, 4)]
    if keras.backend.backend() != "torch":  # batches of 4, 4 and 2 rows: one trace
        assert traced.runs - runs == 1
    assert [len(part) for part in parts] == [4, 4, 2]
    np.testing.assert_allclose(np.concatenate(parts), keras.ops.convert_to_numpy(model(x)),
                               rtol=1e-6, atol=1e-6)
