"""benchmarks/torchvision_baseline.py: the PyTorch user's baseline beside keras_dml."""

import json
import os
import subprocess
import sys

import pytest
from conftest import SHARED_DATASETS

from benchmarks import torchvision_baseline as baseline

CUB_IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")
OURS = "keras_dml on TensorFlow"


def _photos(root, classes=5, images=3):
    for c in range(classes):
        os.makedirs(root / f"class{c}")
        for i in range(images):
            (root / f"class{c}" / f"{i}.jpg").write_bytes(b"not read here")
    (root / "notes.txt").write_text("a file beside the class folders is not a class")
    return root


def test_photo_folder_splits_the_first_classes_in_halves(tmp_path):
    source = _photos(tmp_path / "photos")
    target = baseline.photo_folder(str(source), str(tmp_path / "linked"), classes=4,
                                   images_per_class=2)
    assert sorted(os.listdir(os.path.join(target, "train"))) == ["class0", "class1"]
    assert sorted(os.listdir(os.path.join(target, "test"))) == ["class2", "class3"]
    linked = os.path.join(target, "test", "class3", "1.jpg")
    assert os.readlink(linked) == str(source / "class3" / "1.jpg")
    assert sorted(os.listdir(os.path.dirname(linked))) == ["0.jpg", "1.jpg"]
    with pytest.raises(ValueError, match="1 class folder"):
        baseline.photo_folder(str(source), str(tmp_path / "one"), classes=1)


def _result(samples, images=100, **facts):
    facts = {"images_per_unit": images, "trainable_parameters": 10, "embedding_dim": 8,
             "transform": {"resize": 73, "crop": 64}, **facts}
    return {"samples": samples, "facts": facts}


def test_throughput_pairs_each_round_with_the_baseline_and_unequal_work_stops():
    results = {baseline.BASELINE: _result([1.0, 2.0, 1.0]), OURS: _result([0.5, 0.5, 2.0])}
    rows = baseline.throughput(results)
    assert rows[baseline.BASELINE] == {"images_per_s": [75.0, 100.0, 100.0], "ratio": None}
    assert rows[OURS]["images_per_s"][1] == 200.0
    assert rows[OURS]["ratio"] == [0.5, 2.0, 4.0]  # per round: 200 / 100, 200 / 50, 50 / 100
    assert "| keras_dml on TensorFlow | 200.0 [125.0-200.0]" in baseline.table(
        {"train": rows, "embed": rows})
    baseline.check_same_work(results)
    results[OURS] = _result([1.0], trainable_parameters=11)
    with pytest.raises(SystemExit, match="trainable_parameters: 11 against 10"):
        baseline.check_same_work(results)


@pytest.mark.slow  # four processes: keras_dml on TensorFlow and the PyTorch side (~1 min)
@pytest.mark.shared_data
@pytest.mark.requires("torchvision", "pytorch_metric_learning")
def test_quick_run_times_both_sides_on_the_same_network_and_photos(tmp_path):
    out = tmp_path / "baseline.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.torchvision_baseline", "--data-dir", CUB_IMAGES,
         "--quick", "--backends", "tensorflow", "--json", str(out)],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, result.stderr[-3000:]
    info = json.loads(out.read_text())
    for task, images in (("train", 3 * 4 * 2), ("embed", 4 * 8)):
        rows = info[task]
        assert set(rows) == {baseline.BASELINE, OURS}
        assert rows[baseline.BASELINE]["ratio"] is None and rows[OURS]["ratio"][1] > 0
        for name, facts in info["facts"][task].items():
            assert facts["images_per_unit"] == images, name
            # cnn3 of width 32 at 32 px: 3 convolutions, 3 batch norms, 4 x 4 x 32 -> 128
            assert facts["trainable_parameters"] == 896 + 2 * 9248 + 3 * 64 + 512 * 128 + 128
    assert "keras_dml on TensorFlow" in result.stdout and "load average" in result.stdout
