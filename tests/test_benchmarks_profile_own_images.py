"""benchmarks/profile_own_images.py: the own-images step split on a few real photos."""

import json
import os
import subprocess
import sys

import pytest
from conftest import SHARED_DATASETS

CUB_IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")


def _profile(tmp_path, *options):
    photos = tmp_path / "photos"
    for species in sorted(os.listdir(CUB_IMAGES))[:6]:
        os.makedirs(photos / species)
        for name in sorted(os.listdir(os.path.join(CUB_IMAGES, species)))[:8]:
            os.symlink(os.path.join(CUB_IMAGES, species, name), photos / species / name)
    out = tmp_path / "split.json"
    result = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_own_images", "--data-dir", str(photos),
         "--image-size", "32", "--classes-per-batch", "2", "--samples-per-class", "2",
         "--steps", "2", "--warmup", "1", "--rounds", "1", "--json", str(out), *options],
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # a model compiled, fitted and profiled on photos (~1 min)
@pytest.mark.shared_data
def test_profile_of_the_own_images_step_finds_every_part(tmp_path):
    info = _profile(tmp_path)
    assert info["image_size"] == 32 and info["file pipeline"] > 0
    assert set(info["hand-over"]) == {"to NumPy", "to the backend"}
    for name in ("step in memory", "step from files", "plain Keras step in memory"):
        assert info[name] > 0 and len(info["rounds"][name]) == 1
    parts = info["split of the step in memory (profiler)"]["parts"]
    assert parts["convolution"]["total"] > 0 and parts["loss"]["total"] > 0


@pytest.mark.slow  # MobileNetV3Small and its plain-Keras twin compiled and fitted (~1 min)
@pytest.mark.shared_data
def test_an_applications_backbone_is_timed_beside_its_plain_keras_twin(tmp_path):
    info = _profile(tmp_path, "--backbone", "MobileNetV3Small", "--no-profile")
    assert info["backbone"] == "MobileNetV3Small"
    for name in ("step in memory", "step from files", "plain Keras step in memory"):
        assert info[name] > 0
    assert info["keras_dml / plain Keras, in memory"] > 0
    assert "split of the step in memory (profiler)" not in info
