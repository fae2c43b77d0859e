"""benchmarks/embed_throughput.py: every part runs on every backend (a few tiny photos)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _photos(folder, classes=3, per_class=4):
    """Small colour JPEGs in `folder/<class>/`, of differing sizes."""
    import PIL.Image

    rng = np.random.default_rng(0)
    for c in range(classes):
        os.makedirs(folder / f"class{c}")
        for i in range(per_class):
            pixels = rng.integers(0, 256, (40 + 7 * i, 48, 3), dtype=np.uint8)
            PIL.Image.fromarray(pixels).save(folder / f"class{c}" / f"{i}.jpg")
    return folder


@pytest.mark.slow  # three backend workers start, build and embed (~1 min)
@pytest.mark.requires("tensorflow", "jax", "torch", "PIL")
def test_quick_run_reports_every_part_on_every_backend(tmp_path):
    out = tmp_path / "figures.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.embed_throughput", "--quick",
         "--data-dir", str(_photos(tmp_path / "photos")), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads(out.read_text())
    parts = info["figures"]["cnn3"]
    assert parts["image_size"] == 32
    for part in ("files", "pipeline", "forward", "predict"):
        rows = parts[part]
        assert len(rows["load"]) == 2
        for backend in ("tensorflow", "jax", "torch"):
            assert rows[backend]["images/s"] > 0
        assert rows["tensorflow"]["ratio to TF"] == 1.0
    assert "| cnn3 @ 32 px | files |" in result.stdout


def test_photos_take_every_nth_file_of_the_listing(tmp_path):
    from benchmarks.embed_throughput import photos

    folder = _photos(tmp_path / "photos")
    chosen = photos(str(folder), 6)
    assert len(chosen) == 6
    assert {os.path.basename(os.path.dirname(p)) for p in chosen} == {"class0", "class1",
                                                                     "class2"}
    assert len(photos(str(folder), 100)) == 12


def test_a_missing_folder_is_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.embed_throughput", "--data-dir",
         str(tmp_path / "nowhere")], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 2
    assert "--data-dir" in result.stderr and "Traceback" not in result.stderr
