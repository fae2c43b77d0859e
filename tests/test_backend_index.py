"""The index and the evaluation core with neither faiss nor TensorFlow: `Index()` searches,
the retrieval metrics run, and a kernel whose package is absent fails in one clear line.

The child-process tests hide both packages (`sys.modules[name] = None`: `import`
fails, as on `pip install -e ".[jax]"` or `".[torch]"`) and run on the parent's Keras
backend, or on JAX when the parent runs on TensorFlow. The in-process tests run on
whatever is installed. Run under each KERAS_BACKEND; needs no optional package.
"""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import reference_evaluation as reference
from keras_dml.evaluation import nearest_neighbors, retrieval_metrics, retrieval_report
from keras_dml.index import Index

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

TESTS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TESTS)
BACKEND = "jax" if keras.backend.backend() == "tensorflow" else keras.backend.backend()

_HIDE = """
import sys
for name in ("faiss", "tensorflow", "tensorflow_datasets"):
    sys.modules[name] = None  # `import faiss` / `import tensorflow` fail
"""


def _run_without_faiss_and_tensorflow(code, tmp_path):
    path = os.pathsep.join([ROOT, TESTS, os.environ.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", _HIDE + textwrap.dedent(code)],
                            capture_output=True, text=True, cwd=tmp_path, timeout=600,
                            env=dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().endswith("ok"), result.stdout


def test_a_default_index_adds_searches_saves_and_loads(tmp_path):
    _run_without_faiss_and_tensorflow("""
        import numpy as np

        import reference_evaluation as reference
        from keras_dml.evaluation.knn_faiss import resolve_kernel
        from keras_dml.index import Index

        assert resolve_kernel("auto") == "numpy"
        rng = np.random.default_rng(0)
        gallery = rng.integers(-2, 3, size=(300, 6)).astype("float32")  # ties everywhere
        queries = rng.integers(-2, 3, size=(40, 6)).astype("float32")
        for metric in ("cosine", "dot", "euclidean"):
            index = Index(metric=metric)
            index.add(gallery, labels=np.arange(300) % 7)
            result = index.search(queries, k=9)
            if metric != "cosine":  # integer scores: exact, ties by insertion order
                expected = reference.nearest_neighbors(queries, gallery, 9, metric)
                np.testing.assert_array_equal(result.ids, expected)
            assert result.labels.shape == (40, 9)
            assert index.recall_vs_exact(queries, k=5) == 1.0
        filtered = index.search(queries, k=3, filter={"label": [2, 3]})
        assert set(np.unique(filtered.labels)) <= {2, 3}
        index.save("saved")
        np.testing.assert_array_equal(Index.load("saved").search(queries, k=9).ids, result.ids)
        assert sys.modules["faiss"] is None and sys.modules["tensorflow"] is None
        print("ok")
    """, tmp_path)


def test_the_retrieval_metrics_run_and_equal_the_reference(tmp_path):
    _run_without_faiss_and_tensorflow("""
        import numpy as np

        import reference_evaluation as reference
        from keras_dml.evaluation import (nearest_neighbors, retrieval_metrics,
                                          retrieval_report)

        rng = np.random.default_rng(1)
        x, y = rng.normal(size=(150, 8)).astype("float32"), rng.integers(0, 10, 150)
        expected = reference.retrieval_metrics(x, y, ks=(1, 4))
        ours = retrieval_metrics(x, y, ks=(1, 4))
        report = retrieval_report(x, y, ks=(1, 4)).metrics
        for key in ("recall@1", "recall@4", "precision@1", "r_precision", "map@r"):
            assert abs(ours[key] - expected[key]) < 1e-12, key
            assert report[key] == ours[key], key
        found, _ = nearest_neighbors(x[:20], x[20:], k=5)
        np.testing.assert_array_equal(found, reference.nearest_neighbors(x[:20], x[20:], 5,
                                                                         "cosine"))
        print("ok")
    """, tmp_path)


def test_a_kernel_or_backend_whose_package_is_absent_fails_in_one_clear_line(tmp_path):
    _run_without_faiss_and_tensorflow("""
        import numpy as np

        from keras_dml.evaluation import nearest_neighbors, retrieval_metrics
        from keras_dml.index import Index

        x = np.eye(4, dtype="float32")

        def message(use):
            try:
                use()
            except ImportError as error:
                return str(error)
            raise AssertionError(f"{use} did not raise ImportError")

        for use in (lambda: Index(kernel="faiss"),
                    lambda: nearest_neighbors(x, k=1, kernel="faiss"),
                    lambda: retrieval_metrics(x, [0, 0, 1, 1], ks=(1,), kernel="faiss")):
            text = message(use)
            assert text.startswith('kernel="faiss" needs faiss, which is not installed'), text
            assert "pip install faiss-cpu" in text and "\\n" not in text, text
        text = message(lambda: Index(backend="faiss_hnsw").add(x))
        assert "'faiss_hnsw' backend needs faiss" in text, text
        text = message(lambda: Index(kernel="tensorflow"))
        assert 'kernel="tensorflow" needs TensorFlow' in text and "\\n" not in text, text
        print("ok")
    """, tmp_path)


@pytest.mark.parametrize("budget", [None, 7])
def test_the_numpy_kernel_ranks_duplicates_and_ties_by_index_in_process(budget, monkeypatch):
    """Copies of 12 rows: each query's ranked distinct rows expand into their copies
    (with budget 7: a few queries' candidates at a time)."""
    from keras_dml.evaluation import knn

    if budget:
        monkeypatch.setattr(knn, "_EXPANSION_BUDGET", budget)
    rng = np.random.default_rng(2)
    distinct = rng.integers(-1, 2, size=(12, 4)).astype("float32")
    gallery = distinct[rng.integers(0, 12, 200)]  # every row has copies
    index = Index(metric="dot", kernel="numpy")
    index.add(gallery, labels=np.arange(200) % 5)
    found = index.search(gallery[:30], k=25).ids
    np.testing.assert_array_equal(found, reference.nearest_neighbors(gallery[:30], gallery, 25,
                                                                     "dot"))
    loo, _ = nearest_neighbors(gallery, k=25, metric="dot", kernel="numpy", chunk_size=17)
    np.testing.assert_array_equal(loo, reference.nearest_neighbors(gallery, None, 25, "dot"))


def test_leave_one_out_and_query_gallery_metrics_agree_in_process():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(120, 6)).astype("float32"), rng.integers(0, 8, 120)
    for gallery in ((), (x[40:], y[40:])):
        queries = (x, y) if not gallery else (x[:40], y[:40])
        ours = retrieval_metrics(*queries, *gallery, ks=(1, 2), kernel="numpy")
        report = retrieval_report(*queries, *gallery, ks=(1, 2), kernel="numpy").metrics
        for key in ("recall@1", "recall@2", "precision@1", "r_precision", "map@r",
                    "num_queries", "num_excluded_queries"):
            assert report[key] == ours[key], key


@pytest.mark.parametrize("kernel", ["cuda", "Numpy"])
def test_an_unknown_kernel_is_named(kernel):
    with pytest.raises(ValueError, match=f"kernel must be one of .*got '{kernel}'"):
        Index(kernel=kernel)
    with pytest.raises(ValueError, match=f"kernel must be one of .*got '{kernel}'"):
        nearest_neighbors(np.eye(3, dtype="float32"), k=1, kernel=kernel)
