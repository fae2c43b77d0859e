"""Approximate indexes from the command line: `keras-dml index --index-params /
--search-params` checked, recorded in the collection and used by its searches; `keras-dml
search --search-params` and `--measure-recall N` (recall@k against an exact scan)."""

import numpy as np
import pytest
from test_index_catalogue import (  # noqa: F401 (fixture)
    CLASSES, _expected, _main, _png, run_dir)

from keras_dml import cli
from keras_dml.index import Index
from keras_dml.index.milvus import from_milvus_names


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """root/<class>/<image>.png, 3 classes x 4."""
    root = tmp_path_factory.mktemp("approximate") / "photos"
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(4):
            _png(root / name / f"{i}.png", colour, 10 * number + i)
    return root


@pytest.fixture(scope="module")
def hnsw(photos, run_dir, tmp_path_factory):  # noqa: F811
    """A Lite file whose collection was built by `index --index-type HNSW` with params."""
    uri = str(tmp_path_factory.mktemp("hnsw") / "catalogue.db")
    assert cli.main(["index", str(run_dir), "--images", str(photos), "--uri", uri,
                     "--index-type", "HNSW", "--index-params", "M=8,efConstruction=40",
                     "--search-params", "ef=16"]) == 0
    return uri


def _fails(argv, capsys):
    code = cli.main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    return err


def test_milvus_names_map_to_options_and_bad_ones_name_the_allowed_keys():
    assert from_milvus_names("hnsw", "build", {"M": "16", "efConstruction": 200}) == {
        "m": 16, "ef_construction": 200}
    assert from_milvus_names("IVF_FLAT", "search", {"nprobe": "4"}) == {"nprobe": 4}
    with pytest.raises(ValueError, match=r"^--x: HNSW takes ef at search time, got 'nprobe'"):
        from_milvus_names("HNSW", "search", {"nprobe": "4"}, "--x")
    with pytest.raises(ValueError, match=r"IVF_FLAT takes nprobe at search time, got 'nlist' "
                                         r"\(a build parameter"):
        from_milvus_names("IVF_FLAT", "search", {"nlist": "4"})
    with pytest.raises(ValueError, match="FLAT takes no keys at build time"):
        from_milvus_names("FLAT", "build", {"M": "4"})
    for bad in ("0", "abc", "2.5", "-3"):
        with pytest.raises(ValueError, match=f"--y ef must be a positive integer, got '{bad}'"):
            from_milvus_names("HNSW", "search", {"ef": bad}, "--y")


@pytest.mark.requires("faiss")
def test_measure_recall_of_a_saved_approximate_index_against_numpy(tmp_path, capsys):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 16)).astype(np.float32)
    approximate = Index(backend="faiss_ivf", nlist=20, nprobe=1)
    approximate.add(x, ids=np.arange(1000, 1400))
    approximate.save(tmp_path / "ivf")
    out = _main(["search", tmp_path / "ivf", "--measure-recall", "50", "--k", "5"], capsys)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    chosen = np.random.default_rng(0).choice(400, 50, replace=False)
    truth = np.argsort(-(unit[chosen] @ unit.T), axis=1)[:, :5] + 1000
    found = approximate.search(x[chosen], 5).ids
    expected = np.mean([len(set(f) & set(t)) / 5 for f, t in zip(found, truth)])
    assert expected < 0.95  # one of 20 clusters probed misses neighbours
    assert out.startswith(f"recall@5 {expected:.4f}: faiss_ivf (nlist=20, nprobe=1) against an "
                          "exact scan of the 400 stored vectors, on 50 sampled items")
    exact = Index()
    exact.add(x)
    exact.save(tmp_path / "exact")
    out = _main(["search", tmp_path / "exact", "--measure-recall", "1000", "--k", "500"],
                capsys)
    assert out.startswith("recall@400 1.0000: exact (") and "on 400 sampled items" in out


@pytest.mark.slow  # the Lite collection: ~9 s
@pytest.mark.requires("pymilvus", "milvus_lite")
def test_index_params_are_recorded_and_used_by_search(hnsw, photos, run_dir, monkeypatch,  # noqa: F811
                                                      capsys):
    with Index.open(hnsw) as index:
        assert index.options == {"index_type": "HNSW", "m": 8, "ef_construction": 40,
                                 "ef_search": 16}
    import pymilvus

    sent = []
    search = pymilvus.MilvusClient.search

    def spy(self, *args, **kwargs):
        sent.append(kwargs["search_params"]["params"])
        return search(self, *args, **kwargs)

    monkeypatch.setattr(pymilvus.MilvusClient, "search", spy)
    query = sorted(photos.glob("cat/*.png"))[0]
    _main(["search", hnsw, query, "--k", "3"], capsys)
    _main(["search", hnsw, query, "--k", "3", "--search-params", "ef=40"], capsys)
    assert sent == [{"ef": 16}, {"ef": 40}]
    with Index.open(hnsw) as index:  # a search's parameters are not recorded
        assert index.options["ef_search"] == 16


@pytest.mark.slow
@pytest.mark.requires("pymilvus", "milvus_lite")
def test_measure_recall_prints_recall_at_k_of_the_collection(hnsw, photos, run_dir,  # noqa: F811
                                                             capsys):
    out = _main(["search", hnsw, "--measure-recall", "5", "--k", "3", "--search-params",
                 "ef=20"], capsys)
    files = sorted(photos.glob("*/*.png"))
    chosen = np.sort(np.random.default_rng(0).choice(12, 5, replace=False))
    with Index.open(hnsw, ef_search=20) as index:
        expected = index.recall_vs_exact(index.embeddings[chosen], 3)
        from_images = index.recall_vs_exact(_expected(run_dir, [files[i] for i in chosen]), 3)
    assert out.startswith(f"recall@3 {expected:.4f}: HNSW (M=8, efConstruction=40, ef=20) "
                          "against an exact scan of the 12 stored vectors, on 5 sampled items")
    out = _main(["search", hnsw, photos, "--measure-recall", "5", "--k", "3"], capsys)
    assert out.startswith(f"recall@3 {from_images:.4f}: HNSW (M=8, efConstruction=40, ef=16) "
                          f"against an exact scan of the 12 stored vectors, on 5 query images "
                          f"sampled from {photos}")


@pytest.mark.parametrize("argv,message", [
    (["--index-type", "HNSW", "--index-params", "M=8,nprobe=3"],
     "--index-params: HNSW takes M, efConstruction at build time, got 'nprobe'."),
    (["--index-type", "IVF_FLAT", "--search-params", "nprobe=many"],
     "--search-params nprobe must be a positive integer, got 'many'."),
    (["--index-type", "HNSW", "--search-params", "ef"],
     "--search-params takes KEY=VALUE pairs separated by commas, e.g. ef=256, got 'ef'."),
    (["--index-params", "M=8"], "--index-params needs --index-type HNSW or IVF_FLAT"),
])
@pytest.mark.requires("pymilvus")
def test_bad_index_parameters_are_refused_before_anything_is_written(
        photos, run_dir, tmp_path, argv, message, capsys):  # noqa: F811
    uri = tmp_path / "new.db"
    err = _fails(["index", run_dir, "--images", photos, "--uri", uri, *argv], capsys)
    assert message in err
    assert not uri.exists()


@pytest.mark.slow
@pytest.mark.requires("pymilvus", "milvus_lite")
def test_search_parameters_of_another_index_type_and_misuse_are_refused(
        hnsw, photos, run_dir, tmp_path, capsys):  # noqa: F811
    err = _fails(["search", hnsw, photos, "--search-params", "nprobe=4"], capsys)
    assert "--search-params: HNSW takes ef at search time, got 'nprobe'." in err
    err = _fails(["search", hnsw, photos, "--measure-recall", "0"], capsys)
    assert "--measure-recall must be at least 1, got 0." in err
    assert "or --measure-recall N." in _fails(["search", hnsw], capsys)
    err = _fails(["index", run_dir, "--images", photos, "--output", tmp_path / "i",
                  "--search-params", "ef=8"], capsys)
    assert "--search-params applies to a Milvus index: pass --uri." in err
