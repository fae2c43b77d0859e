"""The serve load test's parts: the catalogue builder, the report's targets, the bare glue
script on a tiny catalogue, and `benchmarks/serve_load.py --quick` end to end against
`keras-dml serve` on a `milvus-lite server`. No timing is asserted: the machine's load
decides the figures."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from benchmarks import serve_load_catalogue as catalogue
from benchmarks.serve_load_report import markdown, summarize, targets
from conftest import SHARED_DATASETS
from test_index_catalogue import _main, run_dir  # noqa: F401 (fixture)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CUB_IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")


@pytest.fixture()
def source(tmp_path):
    """source/<class>/<photo>.jpg: 2 classes x 3 photos of random pixels, 40 x 30."""
    rng = np.random.default_rng(0)
    for label in ("gull", "wren"):
        (tmp_path / "source" / label).mkdir(parents=True)
        for i in range(3):
            pixels = rng.integers(0, 256, (30, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "source" / label / f"{i}.jpg")
    return tmp_path / "source"


def test_catalogue_is_deterministic_in_class_folders_and_resumes(source, tmp_path):
    paths = catalogue.build(source, tmp_path / "a", 14, size=32)
    assert len(paths) == 14  # 3 variants of each of 6 photos, cut at 14
    assert sorted(os.listdir(tmp_path / "a")) == ["gull", "wren"]
    assert os.path.basename(paths[0]) == "0_00.jpg" and os.path.basename(paths[-1]) == "1_01.jpg"
    with Image.open(paths[1]) as image:
        assert image.size == (32, 32) and image.format == "JPEG"
    again = catalogue.build(source, tmp_path / "b", 14, size=32)
    assert [open(p, "rb").read() for p in paths] == [open(p, "rb").read() for p in again]
    assert len({open(p, "rb").read() for p in paths}) == 14  # every variant differs
    os.remove(paths[3])
    stamp = os.path.getmtime(paths[2])
    assert catalogue.build(source, tmp_path / "a", 14, size=32) == paths
    assert os.path.exists(paths[3]) and os.path.getmtime(paths[2]) == stamp


def test_catalogue_needs_class_folders(tmp_path):
    (tmp_path / "loose.jpg").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no photos in class folders"):
        catalogue.build(tmp_path, tmp_path / "out", 10)


def test_the_guide_shows_the_glue_script_as_it_is():
    with open(os.path.join(ROOT, "docs", "guide", "serve.md")) as f:
        guide = f.read()
    with open(os.path.join(ROOT, "examples", "serve_glue.py")) as f:
        script = f.read()
    shown = guide.split("```python\n")[1].split("```")[0]
    imports, body = shown.split("\n\n\n")
    assert imports in script and body in script and "class Glue" in body


def _run(system, clients, latencies, seconds, errors=0, rss=()):
    summary = summarize({"latencies_ms": latencies, "window_s": seconds, "errors": errors},
                        list(rss))
    summary.update(system=system, clients=clients)
    return summary


def test_report_decides_the_targets_from_the_figures():
    floor = _run("glue script", 1, [10.0] * 100, 1.0)
    one = _run("keras-dml serve", 1, [11.0] * 90, 1.0, rss=[(0, 500), (60, 500), (120, 501)])
    eight = _run("keras-dml serve", 8, [30.0] * 250, 1.0, rss=[(0, 500), (60, 560), (120, 620)])
    assert (one["p50_ms"], one["requests_per_s"], eight["memory"]["slope_mb_per_min"]) == (
        11.0, 90.0, 60.0)
    rows = {row["target"].split(":")[0]: row["met"] for row in targets([floor, one, eight])}
    assert rows == {"0 errors": True, "1 client": True, "8 clients": True,
                    "memory flat (slope under 1 % of RSS a minute)": False}
    slow = _run("keras-dml serve", 1, [13.0] * 70, 1.0, errors=1)
    rows = {row["target"].split(":")[0]: row["met"] for row in targets([floor, slow])}
    assert rows == {"0 errors": False, "1 client": False}
    table = markdown({"runs": [floor, one, eight], "targets": targets([floor, one, eight]),
                      "update": None, "steps": {"index": 2.0}, "collection_count": 9})
    assert "| keras-dml serve | 8 | 1.0 | 250 | 250.0 | 30.0 | 30.0 | 30.0 | 0 | - | - |" in table
    assert "| memory flat" in table and "| NO |" in table


@pytest.mark.slow
@pytest.mark.requires("pymilvus", "milvus_lite", "tensorflow")
def test_glue_script_answers_from_the_export_and_the_collection(source, run_dir, tmp_path,  # noqa: F811
                                                                capsys):
    """The guide's glue script: a keras-dml export and a collection keras-dml indexed (in
    a process of its own, which releases the Milvus Lite file when it ends)."""
    images = tmp_path / "catalogue"
    catalogue.build(source, images, 12, size=24)
    uri = tmp_path / "catalogue.db"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ROOT}
    done = subprocess.run([sys.executable, "-m", "keras_dml.cli", "index", run_dir, "--images",
                           images, "--uri", uri, "--collection", "shop"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    _main(["export", run_dir, tmp_path / "savedmodels", "--version", "1"], capsys)
    query = images / "wren" / "2_01.jpg"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "serve_glue.py"),
                           tmp_path / "savedmodels" / "1", uri, "shop", query, "--k", "3"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert len(lines) == 3 and lines[0] == "1. wren/2_01.jpg  label wren  similarity 1.0000"


@pytest.mark.slow
@pytest.mark.shared_data
@pytest.mark.requires("pymilvus", "milvus_lite", "tensorflow", "locust", "fastapi")
def test_serve_load_quick_measures_every_level_and_the_update(run_dir, tmp_path):  # noqa: F811
    """`--quick`: a 300-photo catalogue, the glue script and 1, 8 and 32 clients for a few
    seconds each, `index --update` during the 8-client run; every figure present."""
    from benchmarks import serve_load

    report = serve_load.main([str(a) for a in ("--quick", "--source", CUB_IMAGES, "--workdir",
                                               tmp_path, "--run", run_dir, "--serve-model",
                                               "run")])
    runs = {(run["system"], run["clients"]): run for run in report["runs"]}
    assert sorted(runs) == [("glue script", 1), ("keras-dml serve", 1), ("keras-dml serve", 8),
                            ("keras-dml serve", 32)]
    for run in runs.values():
        assert run["requests"] > 0 and run["errors"] == 0, run
        assert run["p50_ms"] <= run["p95_ms"] <= run["p99_ms"] and run["memory"]["samples"]
    update = report["update"]
    assert "error" not in update, update["error"]
    assert update["count_before"] == report["collection_count"] == 300, update
    assert update["count_after"] == 300 + update["added"] == 305
    assert update["found"] == update["checked"] == 5 and update["count_removed"] == 300
    assert {row["target"].split(":")[0] for row in report["targets"]} >= {"0 errors", "1 client"}
    with open(tmp_path / "serve_load.json") as f:
        assert json.load(f)["runs"] == report["runs"]
    assert (tmp_path / "serve_load.md").read_text().startswith("| system | clients |")
