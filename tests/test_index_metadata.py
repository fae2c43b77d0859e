"""Product ids and metadata: a CSV's id column and typed columns (`list_images`,
`keras-dml index --id-column`), metadata fields and types checked against the index's
record in memory, in a saved index and on Milvus Lite, filters on them, and the
collection's schema as the guide shows a pymilvus reader."""

import os
import re

import numpy as np
import pytest
from test_index_catalogue import CLASSES, _png, run_dir  # noqa: F401 (fixture)

from keras_dml import cli
from keras_dml.index import Index
from keras_dml.index.catalogue import column_values, list_images

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHOP = [  # path, label, sku, price, condition
    ("cat/0.png", "cat", "S-001", "10", "good"),
    ("cat/1.png", "cat", "S-002", "12.5", ""),
    ("dog/0.png", "dog", "S-003", "7", "worn"),
    ("dog/1.png", "dog", "S-004", "", "new"),
]


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    """A folder of photos and `list.csv` with the columns path,label,sku,price,condition."""
    root = tmp_path_factory.mktemp("shop")
    for number, (path, label, *_) in enumerate(SHOP):
        _png(root / path, CLASSES[label], number)
    _write(root / "list.csv", SHOP)
    return root


def _write(path, rows, header="path,label,sku,price,condition"):
    path.write_text("\n".join([header] + [",".join(row) for row in rows]) + "\n")
    return path


def _run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# -- the CSV ---------------------------------------------------------------------------


def test_column_values_keep_one_type_per_column():
    assert column_values(["10", "-3", ""]) == [10, -3, None]
    assert column_values(["10", "12.5", "1e3"]) == [10.0, 12.5, 1000.0]
    assert column_values(["007", "12"]) == ["007", "12"]  # a leading zero: a code, text
    assert column_values(["good", "3"]) == ["good", "3"]
    assert column_values(["nan", "1"]) == ["nan", "1"] and column_values(["", ""]) == [None] * 2
    assert column_values([str(2 ** 63), "1"]) == [str(2 ** 63), "1"]  # beyond 64 bits


def test_a_csv_gives_ids_from_a_column_and_typed_metadata(shop):
    catalogue = list_images(shop / "list.csv", id_column="sku")
    assert catalogue.ids == ["S-001", "S-002", "S-003", "S-004"]
    assert catalogue.id_layout == "column:sku"
    assert catalogue.metadata == [
        {"path": "cat/0.png", "price": 10.0, "condition": "good"},
        {"path": "cat/1.png", "price": 12.5, "condition": None},
        {"path": "dog/0.png", "price": 7.0, "condition": "worn"},
        {"path": "dog/1.png", "price": None, "condition": "new"}]
    plain = list_images(shop / "list.csv")  # without an id column: paths, every column kept
    assert plain.ids == [row[0] for row in SHOP] and plain.id_layout == "relative_path"
    assert plain.metadata[0] == {"path": "cat/0.png", "sku": "S-001", "price": 10.0,
                                 "condition": "good"}
    with pytest.warns(UserWarning, match="list.csv"):
        folder = list_images(shop)
    assert folder.metadata[0] == {"path": "cat/0.png"}  # a folder: the path alone
    assert list_images(shop / "list.csv", id_column="SKU").ids == catalogue.ids  # any case


def test_bad_id_columns_are_refused_naming_lines_and_columns(shop, tmp_path):
    with pytest.raises(ValueError, match=r"no column 'skus'; .* columns sku, price, condition"):
        list_images(shop / "list.csv", id_column="skus")
    with pytest.raises(ValueError, match="'label' names the images' labels, not their ids"):
        list_images(shop / "list.csv", id_column="label")
    with pytest.raises(ValueError, match="is a folder: ids from a column"):
        list_images(shop, id_column="sku")
    listing = tmp_path / "list.csv"
    _write(listing, [(f"{shop}/{row[0]}", *row[1:]) for row in SHOP])
    repeated = [list(row) for row in SHOP]
    repeated[2][2] = repeated[3][2] = repeated[0][2]
    _write(listing, [(f"{shop}/{row[0]}", *row[1:]) for row in repeated])
    with pytest.raises(ValueError, match=r"ids of column 'sku' repeat: 'S-001' on lines 2, 4, 5;"):
        list_images(listing, id_column="sku")
    repeated[2][2] = ""
    _write(listing, [(f"{shop}/{row[0]}", *row[1:]) for row in repeated])
    with pytest.raises(ValueError, match=r"line 4: empty 'sku', the id column"):
        list_images(listing, id_column="sku")


# -- the fields' check -----------------------------------------------------------------


def _items(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 4)).astype(np.float32)


FIRST = [{"path": "a.png", "price": 10, "condition": "good"},
         {"path": "b.png", "price": 12.5, "condition": None},
         {"path": "c.png", "price": 3, "condition": "worn"}]
FIELDS = {"path": "string", "price": "number", "condition": "string"}


def _check_fields(index):
    """The fields of FIRST are kept, typos and type clashes refused, gaps allowed."""
    index.add(_items(3), ids=["s1", "s2", "s3"], metadata=FIRST)
    assert index.metadata_fields == FIELDS
    with pytest.raises(ValueError, match=r"item 0: 'prize' is not a field of this index; its "
                       r"fields are condition \(string\), path \(string\), price \(number\)"):
        index.add(_items(1, 1), ids=["s4"], metadata=[{"path": "d.png", "prize": 3}])
    with pytest.raises(ValueError, match=r"item 1: 'price' = 'cheap' is string but the field "
                       "holds number"):
        index.upsert(_items(2, 1), ids=["s1", "s5"], metadata=[FIRST[0], {"price": "cheap"}])
    assert len(index) == 3 and index.metadata_fields == FIELDS  # nothing stored
    index.add(_items(2, 2), ids=["s6", "s7"],  # a left-out key or a null: no value there
              metadata=[{"path": "e.png"}, {"path": "f.png", "price": None, "condition": "new"}])
    cheap = index.search(_items(1, 3), k=5, filter={"price": {"<": 11}})
    assert sorted(cheap.ids[0].tolist()) == ["s1", "s3"]
    new = index.search(_items(1, 3), k=5, filter={"condition": ["new", "worn"]})
    assert sorted(new.ids[0].tolist()) == ["s3", "s7"]
    with pytest.raises(ValueError, match="unknown field 'prize'"):
        index.search(_items(1, 3), k=2, filter={"prize": 3})
    return index


def test_metadata_fields_are_checked_in_memory_and_in_a_saved_index(tmp_path):
    index = _check_fields(Index())
    index.save(tmp_path / "saved")
    loaded = Index.load(tmp_path / "saved")
    assert loaded.metadata_fields == FIELDS
    with pytest.raises(ValueError, match="'prize' is not a field"):
        loaded.add(_items(1), ids=["x"], metadata=[{"prize": 3}])


def test_integer_fields_widen_and_other_metadata_is_not_checked():
    index = Index()
    index.add(_items(2), metadata=[{"n": 1, "tags": None}, "a plain string"])
    assert index.metadata_fields == {"n": "integer", "tags": None}
    index.add(_items(1), metadata=[{"n": 1.5, "tags": ["x"]}])  # decimals widen integers
    assert index.metadata_fields == {"n": "number", "tags": "array"}
    index.add(_items(2), metadata=[{"n": 2}, ["a", "list"]])  # numbers take integers
    with pytest.raises(ValueError, match=r"'tags' = 'x' is string but the field holds array"):
        index.add(_items(1), metadata=[{"tags": "x"}])
    assert Index().metadata_fields == {}


def test_a_saved_index_of_unchecked_metadata_still_loads(tmp_path):
    """An index saved before the fields were checked loads as it is; new items are checked."""
    index = Index()
    index.add(_items(2), metadata=[{"year": 2020}, {"year": 2021}])
    index.save(tmp_path / "saved")
    # As an older version could save it: the fields are not in index.json but read
    # from the items on loading, and one item holds another type.
    assert "metadata_fields" not in (tmp_path / "saved" / "index.json").read_text()
    (tmp_path / "saved" / "metadata.json").write_text('[{"year": 2020}, {"year": "unknown"}]')
    index = Index.load(tmp_path / "saved")
    assert index.metadata == [{"year": 2020}, {"year": "unknown"}]
    assert index.metadata_fields == {"year": "integer"}
    with pytest.raises(ValueError, match="'year' = 'later' is string"):
        index.add(_items(1), metadata=[{"year": "later"}])


@pytest.mark.requires("pymilvus")
def test_metadata_fields_are_checked_on_milvus_and_kept_by_the_collection(tmp_path):
    uri = str(tmp_path / "shop.db")
    with Index(backend="milvus", uri=uri) as index:
        _check_fields(index)
        expression = index.search(_items(1, 3), k=5, filter='metadata["v"]["price"] > 11')
        assert expression.ids[0].tolist() == ["s2"]
        assert expression.metadata[0] == [FIRST[1]]
    with Index.open(uri) as reopened:  # the collection's record keeps the fields
        assert reopened.metadata_fields == FIELDS
        with pytest.raises(ValueError, match="'prize' is not a field"):
            reopened.upsert(_items(1), ids=["s1"], metadata=[{"prize": 3}])
        with pytest.raises(ValueError, match="'condition' = 2 is integer"):
            reopened.upsert(_items(1), ids=["s1"], metadata=[{"condition": 2}])
        # A collection written before types were kept lists its fields' names alone.
        reopened._record["metadata_fields"] = sorted(FIELDS)
        reopened._store.write_record()
    with Index.open(uri) as old:
        assert old.metadata_fields == dict.fromkeys(FIELDS)
        with pytest.raises(ValueError, match="'prize' is not a field"):
            old.add(_items(1), ids=["s9"], metadata=[{"prize": 3}])
        old.add(_items(1), ids=["s9"], metadata=[{"price": 4}])
        assert old.metadata_fields["price"] == "integer"


# -- the command line ------------------------------------------------------------------


def test_index_id_column_into_a_saved_index(shop, run_dir, tmp_path, capsys):  # noqa: F811
    output = tmp_path / "index"
    code, _, err = _run(["index", run_dir, "--images", shop / "list.csv", "--output", output,
                         "--id-column", "sku"], capsys)
    assert code == 0, err
    index = Index.load(output)
    assert index.ids.tolist() == ["S-001", "S-002", "S-003", "S-004"]
    assert index.metadata == list_images(shop / "list.csv", "sku").metadata
    assert index.info["catalogue"]["ids"] == "column:sku" and index.metadata_fields == {
        "path": "string", "price": "number", "condition": "string"}
    code, out, err = _run(["search", output, shop / "dog" / "0.png", "--k", "1"], capsys)
    # the item is named by its id (the sku), its path a field
    assert code == 0 and re.search(r"1\. S-003\s+label dog .*path=\"dog/0.png\"", out), (
        out + err)

    for argv, message in [
            (["--images", shop, "--id-column", "sku"], "is a folder: ids from a column"),
            (["--id-column", "sku"], "--id-column names a column of the --images CSV"),
            (["--images", shop / "list.csv", "--id-column", "ean"],
             "--id-column ean: .* has no column 'ean'; .* the columns sku, price, condition")]:
        code, _, err = _run(["index", run_dir, "--output", tmp_path / "other", *argv], capsys)
        assert code == 2 and re.search(message, err) and "Traceback" not in err, err


@pytest.mark.slow
@pytest.mark.requires("pymilvus")
@pytest.mark.filterwarnings("ignore:.*fewer than 2 images")  # a two-row CSV's classes
def test_index_uri_id_column_stores_skus_and_refuses_duplicates(shop, run_dir, tmp_path,  # noqa: F811
                                                                 capsys):
    uri = str(tmp_path / "shop.db")
    listing = shop / "list.csv"
    code, out, err = _run(["index", run_dir, "--images", listing, "--uri", uri,
                           "--id-column", "sku"], capsys)
    assert code == 0 and "added 4 images" in out, err
    with Index.open(uri) as index:
        assert sorted(index.ids.tolist()) == ["S-001", "S-002", "S-003", "S-004"]
        stored = dict(zip(index.ids.tolist(), index.metadata))
        assert stored["S-002"] == {"path": "cat/1.png", "price": 12.5, "condition": None}
        assert index.info["catalogue"] == {"root": str(shop), "ids": "column:sku"}
        cheap = index.search(index.get_embeddings(["S-001"]), k=4, filter={"price": {"<": 11}})
        assert sorted(cheap.ids[0].tolist()) == ["S-001", "S-003"]

    # A repeated sku, or a column the collection does not have (a typo in the header),
    # is refused before any image is read: the new row's file is not an image, and the
    # error is not about it.
    broken = tmp_path / "broken.png"
    broken.write_text("<html>not an image</html>")
    rows = [(f"{shop}/{row[0]}", *row[1:]) for row in SHOP]
    doubled = _write(tmp_path / "doubled.csv", rows + [(str(broken), "dog", "S-003", "5", "")])
    code, out, err = _run(["index", run_dir, "--images", doubled, "--uri", uri,
                           "--id-column", "sku"], capsys)
    assert code == 2 and "'S-003' on lines 4, 6" in err and "broken" not in err, err
    typo = _write(tmp_path / "typo.csv", rows[:1] + [(str(broken), "dog", "S-005", "5", "")],
                  header="path,label,sku,prize,condition")
    code, out, err = _run(["index", run_dir, "--images", typo, "--uri", uri, "--id-column",
                           "sku"], capsys)
    assert code == 2 and "'prize' is not a field of this index" in err, err
    assert "price (number)" in err and "broken" not in err and "Traceback" not in err
    with Index.open(uri) as index:
        assert len(index) == 4


# -- the guide's schema reader ---------------------------------------------------------


def _guide_snippet():
    """The pymilvus code of the guide's section "The collection's schema"."""
    with open(os.path.join(ROOT, "docs", "guide", "index_and_verification.md")) as f:
        guide = f.read()
    section = guide[guide.index("## The collection's schema"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.requires("pymilvus")
def test_the_guides_pymilvus_reader_reads_the_schema(tmp_path, monkeypatch):
    uri = tmp_path / "catalogue.db"
    with Index(backend="milvus", uri=str(uri), provenance={"model_fingerprint": "sha256:ab"}) \
            as index:
        index.add(_items(3), ids=["S-001", "S-002", "S-003"], labels=["cat", "dog", "cat"],
                  metadata=FIRST)
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(_guide_snippet(), "guide", "exec"), scope)  # noqa: S102 (the guide's code)
    record = scope["record"]
    assert record["metric"] == "cosine" and record["options"]["index_type"] == "FLAT"
    assert record["metadata_fields"] == FIELDS
    assert record["provenance"]["model_fingerprint"] == "sha256:ab"
    assert [hit["id"] for hit in scope["hits"][0]] == ["S-002"]
    assert scope["hits"][0][0]["entity"]["metadata"]["v"] == FIRST[1]
    assert scope["fields"] == {"id": "VARCHAR", "vector": "FLOAT_VECTOR", "label": "VARCHAR",
                               "metadata": "JSON", "added": "DOUBLE", "seq": "INT64"}
