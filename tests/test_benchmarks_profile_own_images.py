"""benchmarks/profile_own_images.py: the own-images step split on a few real photos."""

import json
import os
import subprocess
import sys

import pytest
from conftest import SHARED_DATASETS

CUB_IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")


def _photos(tmp_path):
    photos = tmp_path / "photos"
    for species in sorted(os.listdir(CUB_IMAGES))[:6]:
        os.makedirs(photos / species)
        for name in sorted(os.listdir(os.path.join(CUB_IMAGES, species)))[:8]:
            os.symlink(os.path.join(CUB_IMAGES, species, name), photos / species / name)
    return photos


def _profile(tmp_path, *options):
    photos = _photos(tmp_path)
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


@pytest.mark.shared_data
def test_an_applications_backbone_is_timed_beside_a_plain_keras_twin_of_it(tmp_path):
    """`--backbone MobileNetV3Small`: the job and its plain-Keras twin hold the same
    network (the fitting is the cnn3 test's, the same code for any backbone)."""
    import keras

    from benchmarks.profile_own_images import own_images_job
    from benchmarks.training_step import plain_model

    photos = _photos(tmp_path)
    job = own_images_job(str(photos), 32, classes_per_batch=2, samples_per_class=2,
                         backbone="MobileNetV3Small", weights="none")
    plain = plain_model(job.input_shape, job.num_classes, job.config.width,
                        job.config.embedding_dim, job.config.backbone)

    def convolutions(model):
        return sorted(tuple(w.shape) for w in model.weights if len(w.shape) == 4)

    assert job.config.backbone == "MobileNetV3Small" and job.input_shape == (32, 32, 3)
    assert convolutions(job.model) == convolutions(plain) != []
    assert any(isinstance(layer, keras.layers.Rescaling) for layer in plain._flatten_layers())
