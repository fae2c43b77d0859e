"""`keras-dml evaluate`: a run measured on a folder, a query/gallery pair of folders and Open
Metric Learning's CSV, with its per-class table and report; bad input named in one line."""

import csv
import json

import numpy as np
import pytest
from test_index_catalogue import CLASSES, _expected, _png, run_dir  # noqa: F401 (fixture)

from keras_dml import cli
from keras_dml.evaluation.query_gallery import retrieval_report

pytest.importorskip("matplotlib")


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """query/<class>/ (3 classes x 2) and gallery/<class>/ (3 classes x 4) of PNGs."""
    root = tmp_path_factory.mktemp("qg")
    for number, (name, colour) in enumerate(CLASSES.items()):
        for i in range(2):
            _png(root / "query" / name / f"q{i}.png", colour, 100 + 10 * number + i)
        for i in range(4):
            _png(root / "gallery" / name / f"g{i}.png", colour, 200 + 10 * number + i)
    return root


def _run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.slow  # t-SNE and the report: ~20 s
def test_query_gallery_folders_print_metrics_and_write_table_and_report(
        run_dir, folders, tmp_path, capsys):  # noqa: F811
    out_dir = tmp_path / "eval"
    code, out, err = _run(["evaluate", run_dir, "--query", folders / "query", "--gallery",
                           folders / "gallery", "--ks", "1,3", "--output", out_dir,
                           "--rerank", "qe"], capsys)
    assert code == 0, err
    queries = sorted((folders / "query").glob("*/*.png"))
    gallery = sorted((folders / "gallery").glob("*/*.png"))
    expected = retrieval_report(_expected(run_dir, queries), [p.parent.name for p in queries],
                                _expected(run_dir, gallery), [p.parent.name for p in gallery],
                                ks=(1, 3)).metrics
    line = next(row for row in out.splitlines() if row.startswith("exact ranking"))
    assert line.split()[2:4] == [f"{100 * expected['recall@1']:.1f}",
                                 f"{100 * expected['recall@3']:.1f}"]
    assert f"{100 * expected['map']:.1f}" == line.split()[-1] and "(6 queries" in out
    assert any(row.startswith("qe ") for row in out.splitlines())
    saved = json.loads((out_dir / "metrics.json").read_text())
    assert [r["ranking"] for r in saved["results"]] == ["exact ranking", "qe"]
    assert saved["failures_ranking"] == "qe"
    assert saved["results"][1]["extra_seconds"] == pytest.approx(
        saved["results"][1]["seconds"] - saved["results"][0]["seconds"], abs=0.011)
    assert saved["results"][0]["metrics"]["recall@3"] == pytest.approx(expected["recall@3"])
    rows = list(csv.DictReader(open(out_dir / "per_class.csv")))
    assert sorted(r["class"] for r in rows) == sorted(CLASSES)
    assert {r["gallery"] for r in rows} == {"4"} and {r["queries"] for r in rows} == {"2"}
    html = (out_dir / "report.html").read_text()
    assert f"relative to {folders}" in html and "query/cat/q0.png" in html
    assert "worst queries by average precision (qe)</h2>" in html
    assert "Most confused class pairs (qe)</h2>" in html
    assert html.count('<td class="l">exact ranking</td>') == 1


def test_several_rerank_methods_one_row_each(run_dir, folders, tmp_path, capsys):  # noqa: F811
    methods = ["none", "k_reciprocal:k1=3,k2=2", "qe:n=2,mutual=0"]
    code, out, err = _run(["evaluate", run_dir, "--query", folders / "query", "--gallery",
                           folders / "gallery", "--ks", "1,3", "--output", tmp_path / "o",
                           "--no-report", "--rerank", *methods], capsys)
    assert code == 0, err
    queries = sorted((folders / "query").glob("*/*.png"))
    gallery = sorted((folders / "gallery").glob("*/*.png"))
    arrays = (_expected(run_dir, queries), [p.parent.name for p in queries],
              _expected(run_dir, gallery), [p.parent.name for p in gallery])
    lines = out.splitlines()
    header = next(i for i, row in enumerate(lines) if row.startswith("ranking"))
    assert lines[header].split()[1:] == ["R@1", "R@3", "P@1", "P@3", "RP", "MAP@R", "mAP",
                                         "ms/query", "extra"]
    titles = ["exact ranking", *methods[1:]]
    saved = json.loads((tmp_path / "o" / "metrics.json").read_text())
    assert [r["ranking"] for r in saved["results"]] == titles
    assert saved["rerank"] == methods and saved["failures_ranking"] == "exact ranking"
    for row, title, method in zip(lines[header + 1:], titles, [None, *methods[1:]]):
        expected = retrieval_report(*arrays, ks=(1, 3), rerank=method).metrics
        assert row.startswith(title)
        values = row[len(title):].split()
        assert values[:7] == [f"{100 * expected[key]:.1f}" for key in (
            "recall@1", "recall@3", "precision@1", "precision@3", "r_precision", "map@r",
            "map")]
        assert len(values) == (7 if method is None else 8)
    assert "per_class.csv and the report's failures: exact ranking" in out


def test_open_metric_learning_csv_with_groups(run_dir, folders, tmp_path, capsys):  # noqa: F811
    listing = tmp_path / "oml.csv"
    files = sorted((folders / "gallery").glob("*/*.png"))
    with open(listing, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["label", "path", "split", "is_query", "is_gallery", "sequence"])
        writer.writerow(["cat", files[0], "train", "", "", ""])  # a training row: skipped
        for i, path in enumerate(files):
            writer.writerow([path.parent.name, path, "validation", "True", "True",
                             f"s{i // 2}"])  # pairs of images share a sequence
    code, out, err = _run(["evaluate", run_dir, "--images", listing, "--output",
                           tmp_path / "o", "--no-report"], capsys)
    assert code == 0, err
    assert "12 queries searched among 12 gallery images" in out and "sequence" in out
    embeddings = _expected(run_dir, files)
    labels = [p.parent.name for p in files]
    groups = np.arange(12) // 2
    expected = retrieval_report(embeddings, labels, embeddings, labels, query_groups=groups,
                                gallery_groups=groups).metrics
    line = next(row for row in out.splitlines() if row.startswith("exact ranking"))
    assert line.split()[-2] == f"{100 * expected['map@r']:.1f}"
    assert not (tmp_path / "o" / "report.html").exists()


@pytest.mark.parametrize("argv,message", [
    (["--query", "Q"], "Pass --query and --gallery together."),
    (["--ks", "0,2"], "--ks must list positive integers"),
    (["--rerank", "best"], "rerank must be one of"),
    (["--rerank", "qe", "dba:depth=0"], "--rerank dba:depth=0: depth must be"),
    (["--rerank", "qe", "none", "qe"], "--rerank lists 'qe' twice."),
    (["--images", "A", "--query", "B", "--gallery", "C"], "Pass one data source"),
])
def test_bad_arguments_are_one_line(run_dir, argv, message, capsys):  # noqa: F811
    code, _, err = _run(["evaluate", run_dir, *argv], capsys)
    assert code == 2 and message in err and "Traceback" not in err


def test_bad_csv_flag_names_the_line_and_output_is_not_overwritten(
        run_dir, folders, tmp_path, capsys):  # noqa: F811
    listing = tmp_path / "bad.csv"
    path = next((folders / "gallery").glob("*/*.png"))
    listing.write_text(f"label,path,is_query,is_gallery\ncat,{path},maybe,1\n")
    code, _, err = _run(["evaluate", run_dir, "--images", listing], capsys)
    assert code == 2 and "line 2: is_query must be true/false" in err
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("keep")
    code, _, err = _run(["evaluate", run_dir, "--images", folders / "gallery", "--output",
                         taken], capsys)
    assert code == 2 and "exists and is not empty" in err
    assert (taken / "mine.txt").read_text() == "keep"


def test_search_rerank_prints_the_reranked_items(run_dir, folders, tmp_path, capsys):  # noqa: F811
    from keras_dml.index import Index

    code, _, err = _run(["index", run_dir, "--images", folders / "gallery", "--output",
                         tmp_path / "index"], capsys)
    assert code == 0, err
    query = next((folders / "query").glob("dog/*.png"))
    code, out, err = _run(["search", tmp_path / "index", query, "--k", "4", "--rerank",
                           "k_reciprocal:k1=3,k2=2"], capsys)
    assert code == 0, err
    expected = Index.load(tmp_path / "index").search(
        _expected(run_dir, [query]), 4, rerank="k_reciprocal:k1=3,k2=2")
    assert [line.split()[1] for line in out.splitlines()[1:]] == [
        item["path"] for item in expected.metadata[0]]
    code, _, err = _run(["search", tmp_path / "index", query, "--rerank", "qe:n=0"], capsys)
    assert code == 2 and "n must be" in err
