"""report.html (keras_dml.plots.report) and the failure figures (keras_dml.plots.failures),
checked as files and in a real headless Chromium."""

import os
import re

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from keras_dml.evaluation.query_gallery import retrieval_report  # noqa: E402
from keras_dml.plots import failures  # noqa: E402
from keras_dml.plots.report import write_report  # noqa: E402

import browser  # noqa: E402


def _data(seed=0, n=60, classes=6):
    rng = np.random.default_rng(seed)
    labels = np.arange(n) % classes
    embeddings = (rng.normal(size=(classes, 8))[labels] + rng.normal(size=(n, 8))).astype(
        "float32")
    images = rng.uniform(size=(n, 20, 20, 3)).astype("float32")
    images[:, :4, :4] = (labels / classes)[:, None, None, None]  # a mark per class
    return embeddings, labels, images


def _png_files(folder, names):
    from PIL import Image

    for name in names:
        with Image.open(os.path.join(folder, name)) as image:
            assert image.size[0] > 100 and image.size[1] > 100


def test_failure_figures_draw_the_report_data(tmp_path):
    embeddings, labels, images = _data()
    report = retrieval_report(embeddings, labels)
    drawn = failures.worst_queries(report, images, path=tmp_path / "w.png", count=4, k=3)
    worst = report.worst_queries(4)
    np.testing.assert_array_equal(drawn["queries"], report.evaluated[worst])
    assert drawn["average_precision"].tolist() == sorted(drawn["average_precision"].tolist())
    np.testing.assert_array_equal(drawn["correct"],
                                  labels[drawn["neighbors"]] == labels[drawn["queries"]][:, None])
    bars = failures.per_class_bars(report, tmp_path / "b.png", count=3,
                                   class_names=[f"c{i}" for i in range(6)])
    assert [row["recall@1"] for row in bars] == sorted(row["recall@1"] for row in bars)
    pairs = failures.confused_pairs(report, tmp_path / "p.png")
    assert pairs == report.confused_pairs(10)
    _png_files(tmp_path, ["w.png", "b.png", "p.png"])


def test_report_is_one_self_contained_file_with_paths_under_thumbnails(tmp_path):
    from PIL import Image

    embeddings, labels, images = _data(1, n=24, classes=4)
    paths = []
    for i, image in enumerate(images):  # image files: the report prints their paths
        path = tmp_path / f"class{labels[i]}" / f"img{i}.png"
        path.parent.mkdir(exist_ok=True)
        Image.fromarray((image * 255).astype("uint8")).save(path)
        paths.append(str(path))
    report = retrieval_report(embeddings, labels)
    out = write_report(tmp_path / "report.html", report, paths, worst=5, k=4,
                       metrics_rows=[("before", report.metrics), ("after", report.metrics)])
    text = open(out, encoding="utf-8").read()
    sources = re.findall(r"src=['\"]([^'\"]+)", text)
    assert len(sources) == 5 * (1 + 4) + 2  # thumbnails + bars + pairs
    assert all(src.startswith("data:image/") for src in sources)
    assert "http://" not in text and "https://" not in text and "<script" not in text
    worst_path = paths[report.evaluated[report.worst_queries(1)[0]]]
    assert os.path.relpath(worst_path, tmp_path) in text  # under the thumbnail
    assert f"relative to {tmp_path}" in text
    assert text.count("class='c bad'") + text.count('class="c bad"') == int(
        (~report.correct()[report.worst_queries(5), :4]).sum())
    assert not list(tmp_path.glob(".*.png"))  # its temporary figures are gone


def test_run_report_row_of_its_own_ranking_fills_every_column_of_the_run_metrics(tmp_path):
    from types import SimpleNamespace

    from keras_dml.evaluation import retrieval_metrics
    from keras_dml.plots.report import write_run_report

    embeddings, labels, images = _data(3, n=30, classes=5)
    after = retrieval_metrics(embeddings, labels)  # as training reports it
    assert "r_precision" in after
    split = SimpleNamespace(labels=labels, images=images, paths=None,
                            class_names=[f"c{i}" for i in range(5)])
    text = open(write_run_report(tmp_path, split, embeddings, after, after),
                encoding="utf-8").read()
    table = text[text.index("<table>"):text.index("</table>")]
    head = re.findall(r"<th>([^<]*)</th>", table)
    row = table[table.index("this report&#x27;s ranking"):].split("</tr>")[0]
    cells = re.findall(r"<td>([^<]*)</td>", row)
    assert len(cells) == len(head) and "" not in cells
    assert float(cells[head.index("r_precision")]) == pytest.approx(
        100 * after["r_precision"], abs=0.051)


@pytest.mark.slow
@browser.needed
def test_report_opens_in_headless_chromium_with_every_image_and_no_console_error(tmp_path):
    embeddings, labels, images = _data(2)
    report = retrieval_report(embeddings, labels)
    path = write_report(tmp_path / "report.html", report, images, worst=6)
    seen = browser.open_report(path, tmp_path / "report.png")
    assert seen["title"] == "Retrieval report"
    assert seen["images"] == 6 * 6 + 2 and seen["broken"] == []
    assert seen["errors"] == []
    assert (tmp_path / "report.png").stat().st_size > 10_000


@pytest.mark.slow
@browser.needed
def test_the_browser_check_fails_on_a_broken_image(tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<html><body><img src='data:image/png;base64,AAAA'>"
                    "<img src='missing.png'></body></html>")
    seen = browser.open_report(page, tmp_path / "broken.png")
    assert len(seen["broken"]) == 2 and seen["errors"]
