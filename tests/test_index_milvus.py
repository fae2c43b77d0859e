"""Tests for keras_dml.index.milvus: `Index` on a real Milvus Lite file, its record and its
faults (another process, dimension, metric, model or index type; an unreachable server; a
file that is not a database; a missing extra). The store's behaviour beside the others is
in test_index_stores.py."""

import importlib.util
import json
import os
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_dml.index import Index, ModelMismatchError, model_fingerprint

pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])


def _data(n=40, d=4, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, d)).astype(np.float32)


@pytest.fixture(scope="module")
def lite(tmp_path_factory):
    return str(tmp_path_factory.mktemp("lite") / "catalogue.db")


def test_a_second_process_is_refused_then_reopens_the_collection(tmp_path):
    """The collection outlives its process; while one process holds a Lite file, another
    gets a clear error (not a corrupt file); the model is checked in the other process."""
    uri, model = str(tmp_path / "shared.db"), _model(0)
    model.save(tmp_path / "model.keras")
    x = _data()
    np.save(tmp_path / "queries.npy", x[:5])
    index = Index(backend="milvus", uri=uri, collection="photos", index_type="HNSW",
                  provenance={"model_fingerprint": model_fingerprint(model), "run": "runs/a"})
    index.add(x, ids=[f"p{i}" for i in range(len(x))], labels=["a"] * len(x))
    expected = index.search(x[:5], k=3)
    flag = tmp_path / "go"
    worker = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "index_reopen_worker.py"), uri, "photos",
         str(tmp_path / "model.keras"), str(tmp_path / "queries.npy"), str(flag)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT})
    try:
        first = worker.stdout.readline()
        index.close()
        flag.touch()
        out, err = worker.communicate(timeout=180)
    finally:
        worker.kill()
    assert first.startswith("locked: ") and "open in another process" in first, first + err
    assert worker.returncode == 0, err[-2000:]
    found = json.loads(out.strip().splitlines()[-1])
    assert found["ids"] == expected.ids.tolist() and found["size"] == len(x)
    np.testing.assert_allclose(found["scores"], expected.scores, rtol=1e-6)
    assert found["fingerprint"] == model_fingerprint(model)  # stable across processes
    assert found["provenance"]["run"] == "runs/a" and found["provenance"]["dim"] == 4
    with Index.open(uri, "photos") as again:  # the worker's write is there
        assert len(again) == len(x) + 1
        assert again.search(-x[:1], k=1).ids.tolist() == [["from-worker"]]
        assert again.backend == "milvus" and again.provenance["metric"] == "cosine"


def test_reopening_with_another_metric_dimension_model_or_index_is_refused(lite):
    a, b = _model(1), _model(2)
    made = {"model_fingerprint": model_fingerprint(a), "run": "runs/a"}
    with Index(metric="dot", backend="milvus", uri=lite, collection="faces",
               index_type="IVF_FLAT", nlist=2, provenance=made) as index:
        index.add(_data())
    with pytest.raises(ValueError, match="holds dot embeddings, not metric='cosine'"):
        Index(backend="milvus", uri=lite, collection="faces")
    with pytest.raises(ValueError, match="dimension 4, not 8"):
        Index(metric="dot", backend="milvus", uri=lite, collection="faces",
              provenance={"dim": 8})
    with pytest.raises(ValueError, match="index options .*IVF_FLAT.*got index_type='HNSW'"):
        Index(metric="dot", backend="milvus", uri=lite, collection="faces", index_type="HNSW")
    with pytest.raises(ValueError, match="'nlist': 64"):
        Index(metric="dot", backend="milvus", uri=lite, collection="faces", nlist=64)
    other = {"model_fingerprint": model_fingerprint(b), "run": "runs/b"}
    with pytest.raises(ModelMismatchError) as refused:
        Index.open(lite, "faces", provenance=other)
    message = str(refused.value)
    assert model_fingerprint(a) in message and model_fingerprint(b) in message
    assert "runs/a" in message and "runs/b" in message
    with pytest.warns(UserWarning, match="allow_mismatch=True"):
        index = Index.open(lite, "faces", provenance=other, allow_mismatch=True, nprobe=2)
    with index:  # reopened with its own metric and index; a search option changed
        assert index.metric == "dot" and index.options["nprobe"] == 2
        assert len(index) == 40
        with pytest.raises(ModelMismatchError, match="runs/a"):
            index.check_model(b)
        index.check_model(a)
        with pytest.raises(ValueError, match="dimension 5 but the index holds dimension 4"):
            index.add(_data(d=5))


def test_open_names_what_is_missing(lite, tmp_path):
    with Index(backend="milvus", uri=lite, collection="present", info={"a": 1}) as index:
        index.add(_data(n=3))
    Index(backend="milvus", uri=lite, collection="present", info={"b": 2}).close()
    with Index.open(lite, "present") as index:
        assert index.info == {"a": 1, "b": 2}
    with pytest.raises(FileNotFoundError, match=r"no collection 'absent'; it has .*'present'"):
        Index.open(lite, "absent")
    with pytest.raises(FileNotFoundError, match="No Milvus Lite database"):
        Index.open(str(tmp_path / "nothing.db"))
    saved = Index()
    saved.add(_data(n=2))
    saved.save(tmp_path / "saved")
    with pytest.raises(ValueError, match="saved by Index.save: read it with Index.load"):
        Index.open(str(tmp_path / "saved"))
    from pymilvus import DataType, MilvusClient

    client = MilvusClient(lite)  # a collection another program made
    schema = client.create_schema()
    schema.add_field("pk", DataType.INT64, is_primary=True)
    schema.add_field("v", DataType.FLOAT_VECTOR, dim=2)
    client.create_collection("theirs", schema=schema)
    with pytest.raises(ValueError, match="'theirs' .* was not made by keras_dml"):
        Index(backend="milvus", uri=lite, collection="theirs")


def test_paths_that_are_not_lite_databases_are_refused(tmp_path):
    a_file = tmp_path / "notes.db"
    a_file.write_text("not a database")
    with pytest.raises(ValueError, match="notes.db is not a Milvus Lite database: it is a file"):
        Index(backend="milvus", uri=str(a_file))
    folder = tmp_path / "photos.db"
    folder.mkdir()
    (folder / "cat.jpg").write_bytes(b"")
    with pytest.raises(ValueError, match=r"not a Milvus Lite database: .*\['cat.jpg'\]"):
        Index(backend="milvus", uri=str(folder))
    with pytest.raises(ValueError, match="path ending in .db"):
        Index(backend="milvus", uri=str(tmp_path / "catalogue"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Index(backend="milvus", uri=str(tmp_path / "no" / "such.db"))
    assert a_file.read_text() == "not a database" and os.listdir(folder) == ["cat.jpg"]


def test_an_unreachable_server_fails_within_seconds():
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="Cannot reach Milvus at http://127.0.0.1:9"):
        Index(backend="milvus", uri="http://127.0.0.1:9", timeout=3)
    assert time.monotonic() - start < 30  # a hang guard, not a timing test


def test_the_missing_extra_is_named(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pymilvus", None)
    with pytest.raises(ImportError, match=r'pip install "keras_dml\[milvus\]"'):
        Index(backend="milvus", uri=str(tmp_path / "a.db"))
    monkeypatch.undo()
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "milvus_lite" else find_spec(name, *a))
    with pytest.raises(ImportError, match=r"needs milvus-lite: pip install \"keras_dml"):
        Index(backend="milvus", uri=str(tmp_path / "a.db"))


def test_milvus_options_are_checked(lite):
    with pytest.raises(ValueError, match="index_type must be one of"):
        Index(backend="milvus", uri=lite, collection="x1", index_type="DISKANN")
    with pytest.raises(ValueError, match=r"Unknown options \['nprobe'\] for Milvus index_type"):
        Index(backend="milvus", uri=lite, collection="x2", index_type="HNSW", nprobe=3)
    with pytest.raises(ValueError, match="uri= is for backend='milvus'"):
        Index(uri=lite)


def test_a_saved_index_moves_into_milvus_with_its_provenance(lite, tmp_path):
    x = _data(n=30)
    made = {"model_fingerprint": "sha256:00112233aabbccdd", "run": "runs/a"}
    memory = Index(provenance=made)
    memory.add(x, labels=np.arange(30) % 3, metadata=[{"n": i} for i in range(30)])
    memory.save(tmp_path / "saved")
    with Index.load(tmp_path / "saved", backend="milvus", uri=lite,
                    collection="moved") as moved:
        assert moved.provenance == memory.provenance and len(moved) == 30
        expected, found = memory.search(x[:4], k=5), moved.search(x[:4], k=5)
        np.testing.assert_array_equal(found.ids, expected.ids)
        assert found.metadata == expected.metadata
        moved.save(tmp_path / "back")  # and back to the in-memory form
    back = Index.load(tmp_path / "back")
    assert back.backend == "exact" and back.provenance == memory.provenance
    np.testing.assert_array_equal(back.search(x[:4], k=5).ids, expected.ids)


def test_search_match_and_filters_never_count_the_collection(lite):
    """Counting a Lite collection walks every key (and a filtered count(*) reads every
    passing row), so the search path asks Milvus for the k best and nothing else; only an
    unfiltered answer shorter than k (k above the size) counts, to name the size."""
    x = _data(n=30)
    index = Index(backend="milvus", uri=lite, collection="uncounted")
    index.add(x, labels=np.arange(30) % 3, metadata=[{"year": 2000 + i} for i in range(30)])
    client = index._store._client
    asked, query = [], client.query

    def recording_query(*args, **kwargs):
        asked.append(kwargs.get("output_fields"))
        return query(*args, **kwargs)

    client.query = recording_query
    try:
        assert index.search(x[:4], k=5).ids.shape == (4, 5)
        assert index.search(x[:4], k=30).ids.shape == (4, 30)  # k = the size: no count
        filtered = index.search(x[:4], k=20, filter={"label": [1], "year": {">": 2020}})
        assert filtered.ids.shape == (4, 3)  # capped at the passing items: ids 22, 25, 28
        assert sorted(filtered.ids[0].tolist()) == [22, 25, 28]
        assert index.search(x[:2], k=3, filter={"label": [7]}).ids.shape == (2, 0)
        with pytest.raises(ValueError, match="Milvus refused the filter expression: "
                           "unexpected token"):
            index.search(x[:1], k=3, filter="label ==== 1")
        assert index.match(x[:3], 0.5).tolist() == [0, 1, 2]
        assert asked == []
        with pytest.raises(ValueError, match="k=31 exceeds the 30 items"):
            index.search(x[:1], k=31)
        assert asked == [["count(*)"]]
    finally:
        client.query = query
        index.close()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc/<pid>/environ")
def test_the_lite_child_flushes_early_and_returns_freed_memory(tmp_path):
    """Lite's default MemTable holds ~200,000 rows of 128-d vectors before a flush, and
    PyArrow's default pool and glibc's many arenas keep what Lite frees: the child serving
    a Lite file flushes at 16 MB (here 6,000 rows of 1,024-d, 24 MB, reach a Parquet
    segment before closing) and runs on the system pool, two arenas."""
    from keras_dml.index.lite_process import CHILD_ENV

    uri = str(tmp_path / "child.db")
    index = Index(backend="milvus", uri=uri, lite_process=True)
    try:
        with open(f"/proc/{index._store._server.pid}/environ", "rb") as f:
            environment = dict(item.split("=", 1) for item in
                               f.read().decode().split("\0") if "=" in item)
        index.add(_data(n=6000, d=1024))
        data = os.path.join(uri, "collections", "keras_dml", "partitions", "_default", "data")
        assert [name for name in os.listdir(data) if name.endswith(".parquet")]
    finally:
        index.close()
    assert {name: environment.get(name) for name in CHILD_ENV} == CHILD_ENV
    assert CHILD_ENV["ARROW_DEFAULT_MEMORY_POOL"] == "system"
