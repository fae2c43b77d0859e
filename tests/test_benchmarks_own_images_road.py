"""benchmarks/own_images_road.py: the command-line road's figures and their table."""

import json
import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_step_times_take_each_epochs_last_progress_figure():
    from benchmarks.own_images_road import step_times

    output = ("Epoch 1/2\n 50/100 ━━ 10s 230ms/step - loss: 1.0\n"
              "100/100 ━━━━ 23s 228ms/step - loss: 0.9\nEpoch 2/2\n"
              "100/100 ━━━━ 20s 1.2s/step - loss: 0.8\n")
    assert step_times(output) == [228.0, 1200.0]
    assert step_times("no progress line") == []


def test_table_gives_medians_spread_and_ratios_to_tensorflow():
    from benchmarks.own_images_road import markdown, summarize

    def road(step, train, rate):
        return {"steps_ms": [step, step], "train_s": train, "index_images_s": rate}

    table = summarize({"tensorflow": [road(200, 40, 600), road(220, 44, 640)],
                       "jax": [road(300, 60, 500), road(340, 64, 520)]})
    assert table["jax"]["training (s)"] == {"median": 62, "min": 60, "max": 64, "q1": 59.0,
                                            "q3": 65.0, "n": 2, "ratio to TF": 1.48}
    assert table["jax"]["index (images/s)"]["ratio to TF"] == 0.82
    text = markdown(table)
    assert text.splitlines()[0] == ("| backend | step, epoch 1 (ms) | step, epoch 2 (ms) | "
                                    "training (s) | index (images/s) |")
    assert "| jax | 320 [300-340] (1.52x) |" in text
    assert "| tensorflow | 210 [200-220] |" in text


def test_flags_below_one_are_refused(tmp_path, capsys):
    from benchmarks.own_images_road import main

    with pytest.raises(SystemExit):
        main(["--data-dir", str(tmp_path), "--rounds", "0"])
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--data-dir", str(tmp_path / "missing")])
    assert "no such folder" in capsys.readouterr().err


@pytest.mark.slow  # a training run and an index run from the command line (~30 s)
@pytest.mark.requires("pymilvus", "milvus_lite", "PIL")
def test_quick_road_trains_and_indexes_from_the_command_line(tmp_path):
    import subprocess
    import sys

    import PIL.Image

    rng = np.random.default_rng(0)
    photos = tmp_path / "photos"
    for c in range(6):
        os.makedirs(photos / f"class{c}")
        for i in range(6):
            pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            PIL.Image.fromarray(pixels).save(photos / f"class{c}" / f"{i}.jpg")
    out = tmp_path / "road.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.own_images_road", "--quick", "--backends",
         "tensorflow", "--data-dir", str(photos), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": ROOT})
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads(out.read_text())
    (run,) = info["rounds"]["tensorflow"]
    assert len(run["steps_ms"]) == 2 and min(run["steps_ms"]) > 0
    assert run["images_indexed"] == 36 and run["index_images_s"] > 0
    assert "| tensorflow | " in result.stdout
