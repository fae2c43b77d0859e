"""`keras-dml search`: --filter on label, metadata and time added (one meaning on a saved
index and on Milvus Lite), --format json|csv, the similarity kept as the score under
--rerank, query paths printed as given, and a Milvus alias as --collection."""

import csv
import datetime
import io
import json
import os
import re
import time

import numpy as np
import pytest
from test_index_catalogue import CLASSES, _embedder, _expected, _main, _png, run_dir  # noqa: F401

from keras_dml import cli
from keras_dml.cli.search_output import CSV_COLUMNS
from keras_dml.index import Index, model_fingerprint

PRICES = {"cat": (5, 12.5, 30), "dog": (8, 19.99, 45), "owl": (2, 25, 60)}


@pytest.fixture(scope="module")
def shop(tmp_path_factory, run_dir):  # noqa: F811
    """photos/<class>/<i>.png (3 x 3), and their catalogue with dict metadata (sku, price,
    condition; the owls lack `condition`) added in two batches, the cat and dog photos
    then the owls after `cut`, saved (`where`), and `milvus_index(shop)` on Milvus Lite."""
    root = tmp_path_factory.mktemp("shop")
    paths, labels, metadata = [], [], []
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(3):
            paths.append(_png(root / "photos" / name / f"{i}.png", colour, 10 * number + i))
            labels.append(name)
            item = {"path": f"{name}/{i}.png", "sku": f"{name[0].upper()}-{i}",
                    "price": PRICES[name][i]}
            if name != "owl":
                item["condition"] = "new" if i % 2 == 0 else "used"
            metadata.append(item)
    shop = {"root": root, "paths": paths, "embeddings": _expected(run_dir, paths),
            "labels": np.array(labels), "metadata": metadata,
            "made": {"model_fingerprint": model_fingerprint(_embedder(run_dir)),
                     "run": str(run_dir)}}
    index = Index(provenance=shop["made"])
    cut = _add_in_two_batches(index, shop)
    index.save(root / "index")
    shop["saved"] = {"where": str(root / "index"), "cut": cut}
    return shop


@pytest.fixture(scope="module")
def milvus_shop(shop):
    """The shop's catalogue in a Milvus Lite file (its own `cut`)."""
    pytest.importorskip("milvus_lite")
    uri = str(shop["root"] / "shop.db")
    with Index(backend="milvus", uri=uri, provenance=shop["made"]) as index:
        cut = _add_in_two_batches(index, shop)
    return {**shop, "milvus": {"where": uri, "cut": cut}}


def _add_in_two_batches(index, shop):
    """Adds the cat and dog photos, then the owls; returns a time between the two."""
    for start, stop in ((0, 6), (6, 9)):
        if start:
            time.sleep(0.05)
            cut = time.time()
            time.sleep(0.05)
        index.add(shop["embeddings"][start:stop], labels=shop["labels"][start:stop],
                  ids=[m["sku"] for m in shop["metadata"][start:stop]],
                  metadata=shop["metadata"][start:stop])
    return cut


@pytest.fixture(params=["saved", pytest.param("milvus", marks=[
    pytest.mark.requires("pymilvus"), pytest.mark.slow])])
def store(request):
    """`(shop, its index as the command takes it, the time between its batches)`."""
    shop = request.getfixturevalue({"saved": "shop", "milvus": "milvus_shop"}[request.param])
    return shop, shop[request.param]["where"], shop[request.param]["cut"]


def _run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _json(argv, capsys):
    code, out, err = _run([*argv, "--format", "json"], capsys)
    assert code == 0, err
    return json.loads(out)


def _iso(seconds):
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).isoformat()


def _expected_ids(shop, query_rows, mask, k):
    """The ids of the k most similar passing items of each query, by cosine similarity."""
    x = shop["embeddings"] / np.linalg.norm(shop["embeddings"], axis=1, keepdims=True)
    rows = np.flatnonzero(mask)
    ids = np.array([m["sku"] for m in shop["metadata"]])
    scores = x[query_rows] @ x[rows].T
    return [ids[rows[np.argsort(-s, kind="stable")[:min(k, len(rows))]]].tolist()
            for s in scores]


@pytest.mark.slow  # nine searches: ~15 s
def test_filter_on_label_metadata_and_time_added(store, capsys):
    shop, where, cut = store
    queries = [shop["paths"][1], shop["paths"][7]]  # a dog photo and an owl photo
    price = np.array([m["price"] for m in shop["metadata"]])
    condition = np.array([m.get("condition", "") for m in shop["metadata"]])
    labels, after = shop["labels"], np.arange(9) >= 6
    cases = {
        'price < 20 and condition == "new"': (price < 20) & (condition == "new"),
        f'label in ["cat", "owl"] and added > "{_iso(cut)}"':
            np.isin(labels, ["cat", "owl"]) & after,
        "condition != 'new' and price >= 19.99": (condition == "used") & (price >= 19.99),
        'sku not in ["C-0", "O-2"] and label != "dog"':
            ~np.isin([m["sku"] for m in shop["metadata"]], ["C-0", "O-2"]) & (labels != "dog"),
        f"added <= {cut}": ~after,
        "id == 'D-2'": np.arange(9) == 5,
    }
    for expression, mask in cases.items():
        answer = _json(["search", where, *queries, "--k", "4", "--filter", expression], capsys)
        found = [[item["id"] for item in q["results"]] for q in answer["queries"]]
        assert found == _expected_ids(shop, [1, 7], mask, 4), expression
        assert answer["filter"] == expression
    # --label keeps working, alone and with --filter.
    answer = _json(["search", where, queries[0], "--k", "9", "--label", "cat", "--filter",
                    "price > 10"], capsys)
    assert [item["id"] for item in answer["queries"][0]["results"]] == _expected_ids(
        shop, [1], (labels == "cat") & (price > 10), 9)[0]
    code, out, err = _run(["search", where, queries[0], "--k", "9", "--label", "owl"], capsys)
    assert code == 0 and re.findall(r"label (\S+)", out) == ["owl"] * 3, err
    for rerank in ([], ["--rerank", "k_reciprocal"]):
        code, _, err = _run(["search", where, queries[0], "--filter", "price > 1000", *rerank],
                            capsys)
        assert code == 2 and err.strip().splitlines() == [
            f"keras-dml search: error: No item in {where} passes --filter 'price > 1000': "
            "nothing to search."]
    # A wrong field or type is refused alike on both stores, before any query is read.
    missing = shop["root"] / "missing.png"
    for expression, message in (
            ("prize < 20", "unknown field 'prize'; the index has ['added', 'condition', "
             "'id', 'label', 'metadata', 'path', 'price', 'sku']"),
            ("label == 3", "filter field 'label': the index's labels are strings, got 3."),
            ('added > "last week"', "filter field 'added': a time is seconds since the "
             "epoch, a datetime or an ISO 8601 date or time such as '2026-11-01', got "
             "'last week'.")):
        code, out, err = _run(["search", where, missing, "--filter", expression], capsys)
        assert code == 2 and not out and message in err, err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("expression,message", [
    ("price <", "--filter 'price <': expected a value: a number, a quoted string, true or "
     "false at column 8, found the end"),
    ("label == cat", "(strings are written in quotes) at column 10, found 'cat'"),
    ('label == "cat" or label == "dog"', "'or' (column 16) is not supported"),
    ("price = 3", "'=' at column 7: equality is written ==."),
    ("(price > 3)", "expected a field name (id, label, added, metadata or a metadata key) "
     "at column 1, found '('"),
])
def test_a_bad_filter_is_refused_in_one_line_before_anything_is_opened(tmp_path, expression,
                                                                      message, capsys):
    code, out, err = _run(["search", tmp_path / "no-index", tmp_path / "q.png", "--filter",
                           expression], capsys)
    assert code == 2 and not out
    assert len(err.strip().splitlines()) == 1 and err.startswith("keras-dml search: error: ")
    assert message in err, err


@pytest.mark.slow  # two searches: ~9 s with the catalogue
def test_json_and_csv_output(store, run_dir, capsys):  # noqa: F811
    shop, where, _ = store
    queries = [shop["paths"][0], shop["paths"][4]]
    answer = _json(["search", where, *queries, "--k", "3", "--threshold", "0.999"], capsys)
    expected = Index.load(shop["saved"]["where"]).search(shop["embeddings"][[0, 4]], 3)
    assert answer["model_fingerprint"] == shop["made"]["model_fingerprint"]
    assert answer["run"] == str(run_dir) and answer["metric"] == "cosine"
    assert answer["collection"] == (None if where == shop["saved"]["where"] else "keras_dml")
    assert answer["index"] == where and answer["k"] == 3 and answer["threshold"] == 0.999
    assert answer["unread"] == [] and answer["rerank"] is None and answer["filter"] is None
    assert [q["query"] for q in answer["queries"]] == [str(q) for q in queries]
    for q, row, ids, similarities in zip(answer["queries"], (0, 4), expected.ids,
                                         expected.similarities):
        assert [item["id"] for item in q["results"]] == ids.tolist()
        np.testing.assert_allclose([item["similarity"] for item in q["results"]],
                                   similarities, atol=1e-5)
        first = q["results"][0]
        assert first["rank"] == 1 and first["rerank_score"] is None
        assert first["label"] == shop["labels"][row] and first["class_name"] is None
        assert first["metadata"] == shop["metadata"][row]
        assert q["matched"] is True  # the photo itself: similarity 1
    assert set(first) == {"rank", "id", "label", "class_name", "similarity", "rerank_score",
                          "metadata"}

    code, out, err = _run(["search", where, *queries, "--k", "3", "--format", "csv"], capsys)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 1 + 2 * 3
    row = dict(zip(CSV_COLUMNS, rows[1]))
    assert row["query"] == str(queries[0]) and row["rank"] == "1" and row["id"] == "C-0"
    assert float(row["similarity"]) == pytest.approx(1.0, abs=1e-5)
    assert row["matched"] == "" and row["rerank_score"] == ""  # no threshold, no rerank
    assert json.loads(row["metadata"]) == shop["metadata"][0]


def _near_and_far(query, where, **options):
    """An index of 4 items within 0.99 cosine similarity of `query` and 8 far ones,
    written to `where` (a saved index, or a collection `rerank` of a Lite file)."""
    rng = np.random.default_rng(1)
    unit = query / np.linalg.norm(query)
    items = np.concatenate([unit + 0.05 * rng.normal(size=(4, 6)),
                            unit + 1.5 * rng.normal(size=(8, 6))]).astype("float32")
    with Index(**options) as index:
        index.add(items, labels=["near"] * 4 + ["far"] * 8)
        if options.get("backend") != "milvus":
            index.save(where)


@pytest.mark.slow
def test_rerank_keeps_the_similarity_as_the_score_and_matches_on_it(store, capsys):
    """`--rerank k_reciprocal --threshold 0.99` once printed "match" above a score of
    -0.24 (the re-ranking distance): the score is the similarity, the re-ranking score
    has its own column, and the match follows the threshold on the similarity."""
    shop, where, _ = store
    query, rerank = shop["paths"][3], "k_reciprocal:k1=3,k2=2"
    if where.endswith(".db"):
        _near_and_far(shop["embeddings"][3], where, backend="milvus", uri=where,
                      collection="rerank", provenance=shop["made"])
        argv = ["search", where, query, "--collection", "rerank"]
    else:
        where = str(shop["root"] / "near-and-far")
        _near_and_far(shop["embeddings"][3], where, provenance=shop["made"])
        argv = ["search", where, query]
    argv += ["--k", "4", "--rerank", rerank]
    code, out, err = _run([*argv, "--threshold", "0.99"], capsys)
    assert code == 0, err
    assert out.splitlines()[0] == f"{query}  match: near"
    rows = re.findall(r"^\s+\d\. id (\d+)\s+label (\S+)\s+score (-?[\d.]+)  "
                      r"rerank (-?[\d.]+)$", out, re.M)
    index = Index.load(where) if not where.endswith(".db") else Index.open(where, "rerank")
    with index:
        reranked = index.search(shop["embeddings"][[3]], 4, rerank=rerank)
        plain = index.search(shop["embeddings"][[3]], 12)
    similarity = dict(zip(plain.ids[0].tolist(), plain.scores[0].tolist()))
    assert [int(r[0]) for r in rows] == reranked.ids[0].tolist()
    assert [r[1] for r in rows] == ["near"] * 4
    scores = [float(r[2]) for r in rows]
    # The case: a match at 0.99 above re-ranking scores well below zero.
    assert scores[0] > 0.99 and min(float(r[3]) for r in rows) < -0.05
    for (item, _, score, rerank_score), expected in zip(rows, reranked.scores[0]):
        assert float(score) == pytest.approx(similarity[int(item)], abs=1e-4)
        assert float(rerank_score) == pytest.approx(expected, abs=1e-4)
    np.testing.assert_allclose(reranked.similarities[0], scores, atol=1e-4)
    # Above the first result's similarity: no match, whatever the re-ranking score.
    threshold = scores[0] + 0.0002
    answer = _json([*argv, "--threshold", str(threshold)], capsys)
    assert answer["queries"][0]["matched"] is False and answer["rerank"] == rerank
    first = answer["queries"][0]["results"][0]
    assert first["similarity"] == pytest.approx(scores[0], abs=1e-4)
    assert first["rerank_score"] == pytest.approx(float(rows[0][3]), abs=1e-4)
    code, out, _ = _run([*argv, "--threshold", str(threshold)], capsys)
    assert out.splitlines()[0] == f"{query}  match: -"


@pytest.mark.slow
def test_query_paths_print_as_given_for_files_and_folders(shop, capsys, monkeypatch):
    monkeypatch.chdir(shop["root"])
    code, out, err = _run(["search", shop["saved"]["where"], "photos/owl/1.png",
                           "photos/dog", "--k", "1"], capsys)
    assert code == 0, err
    queries = [line for line in out.splitlines() if not line.startswith(" ")]
    assert queries == ["photos/owl/1.png"] + [f"photos/dog/{i}.png" for i in range(3)]
    answer = _json(["search", shop["saved"]["where"], "./photos/cat/", "--k", "1"], capsys)
    assert [q["query"] for q in answer["queries"]] == [f"./photos/cat/{i}.png"
                                                       for i in range(3)]
    assert os.path.isfile(answer["queries"][0]["query"])


@pytest.mark.requires("pymilvus")
@pytest.mark.slow
def test_collection_may_be_a_milvus_alias(milvus_shop, capsys):
    from keras_dml.index.milvus import connect, release

    uri = milvus_shop["milvus"]["where"]
    client = connect(uri)
    try:
        client.create_alias("keras_dml", "shop")
    finally:
        release(client, uri)
    answer = _json(["search", uri, milvus_shop["paths"][0], "--k", "2", "--collection", "shop",
                    "--filter", 'condition == "used"'], capsys)
    assert answer["collection"] == "shop"
    used = np.array([m.get("condition") == "used" for m in milvus_shop["metadata"]])
    assert [item["id"] for item in answer["queries"][0]["results"]] == _expected_ids(
        milvus_shop, [0], used, 2)[0]


def test_expressions_are_the_python_dict_filters():
    """The text reads into `Index.search`'s dict filter: the same items pass; ISO times
    (UTC without a zone) are seconds since the epoch; ids and labels of another kind than
    the index's are refused instead of matching nothing."""
    from keras_dml.index.filter_expression import parse_expression
    from keras_dml.index.results import SearchResult

    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    index = Index()
    index.add(x, labels=["a", "b"] * 4, metadata=[{"price": p, "used": p > 4} for p in range(8)])
    text = 'label == "a" and price >= 2 and used == false and added > "2000-01-01T01:00+01:00"'
    assert parse_expression(text) == {"label": {"==": "a"}, "price": {">=": 2},
                                      "used": {"==": False},
                                      "added": {">": "2000-01-01T01:00+01:00"}}
    assert index.search(x, 8, parse_expression(text)).ids[0].tolist() in ([2, 4], [4, 2])
    utc = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
    for given in ("2000-01-01", "2000-01-01T00:00:00+00:00", utc, utc.timestamp()):
        assert index.search(x, 8, {"added": {">": given}}).ids.shape == (8, 8)
        assert index.search(x, 8, {"added": {"<": given}}).ids.shape == (8, 0)
    for bad, message in (({"label": 3}, "labels are strings, got 3"),
                         ({"id": ["0"]}, "ids are integers, got '0'"),
                         ({"added": True}, "a time is seconds since the epoch"),
                         ({"added": "tomorrow"}, "got 'tomorrow'")):
        with pytest.raises(ValueError, match=message):
            index.search(x, 2, bad)
    for method in ("qe", "k_reciprocal"):  # no item passes: empty results, re-ranked too
        nothing = index.search(x[:3], 2, {"price": {">": 100}}, rerank=method)
        assert nothing.ids.shape == nothing.similarities.shape == (3, 0)
    plain = index.search(x[:2], 3)
    assert plain.similarities is plain.scores  # without re-ranking: one array
    old_style = SearchResult(plain.ids, plain.scores, plain.labels, plain.metadata)
    assert old_style.similarities is plain.scores  # positional construction as before


def test_json_and_csv_writers_on_a_result():
    """The writers alone: JSON parses as one document, CSV starts with its header, and a
    padded row (an approximate index that found fewer than k) is left out."""
    from keras_dml.cli.search_output import make_output
    from keras_dml.index.results import SearchResult

    result = SearchResult(np.array([[4, 2, -1]]), np.array([[-0.3, -0.5, -np.inf]], "float32"),
                          np.array([[1, 0, -1]]), [[{"path": "a.png", "price": 3}, None, None]],
                          np.array([[0.95, 0.5, -np.inf]], "float32"))
    about = {"index": "i", "collection": None, "model_fingerprint": "sha256:x", "run": "r",
             "metric": "cosine", "k": 3, "threshold": 0.9, "rerank": "qe", "filter": None,
             "labels": None}
    outputs = {}
    for format in ("json", "csv", "text"):
        stream = io.StringIO()
        output = make_output(format, about, ["zero", "one"], stream)
        output.write(["q.png"], result)
        output.close()
        outputs[format] = stream.getvalue()
    answer = json.loads(outputs["json"])
    assert {k: answer[k] for k in about} == about and answer["unread"] == []
    assert answer["queries"] == [{"query": "q.png", "matched": True, "results": [
        {"rank": 1, "id": 4, "label": 1, "class_name": "one", "similarity": 0.95,
         "rerank_score": -0.3, "metadata": {"path": "a.png", "price": 3}},
        {"rank": 2, "id": 2, "label": 0, "class_name": "zero", "similarity": 0.5,
         "rerank_score": -0.5, "metadata": None}]}]
    rows = list(csv.reader(io.StringIO(outputs["csv"])))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 3
    assert rows[1] == ["q.png", "1", "4", "1", "one", "0.95", "-0.3", "true",
                       '{"path": "a.png", "price": 3}']
    assert outputs["text"].splitlines() == [
        "q.png  match: 1 (one)",
        "   1. a.png  label 1 (one)    score 0.9500  rerank -0.3000  price=3",
        "   2. id 2         label 0 (zero)   score 0.5000  rerank -0.5000"]


def test_text_output_names_an_item_by_its_text_id():
    """Ids from a CSV column (`--id-column sku`) name the item; its path stays shown as a
    field. Ids that are the paths print once."""
    from keras_dml.cli.search_output import make_output
    from keras_dml.index.results import SearchResult

    result = SearchResult(np.array([["C-0", "cat/1.png"]], dtype=object),
                          np.array([[0.9, 0.8]], "float32"), np.array([["cat", "cat"]]),
                          [[{"path": "cat/0.png", "sku": "C-0"}, {"path": "cat/1.png"}]])
    about = {"threshold": None, "rerank": None}
    stream = io.StringIO()
    make_output("text", about, None, stream).write(["q.png"], result)
    assert stream.getvalue().splitlines() == [
        "q.png",
        '   1. C-0  label cat        score 0.9000  path="cat/0.png" sku="C-0"',
        "   2. cat/1.png  label cat        score 0.8000"]
