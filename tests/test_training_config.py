"""`TrainConfig` and `keras-dml train`: the pretrained-backbone options and defaults."""

import json
import os
import subprocess
import sys

import pytest

from keras_dml import cli
from keras_dml.training.config import TrainConfig

from conftest import SHARED_DATASETS

CUB = os.path.join(SHARED_DATASETS, "cub200_subset")


def test_an_applications_backbone_defaults_to_the_papers_fine_tuning():
    config = TrainConfig(backbone="mobilenetv3small")
    assert config.backbone == "MobileNetV3Small"
    assert (config.weights, config.freeze_bn, config.augment_crop) == (
        "imagenet", True, "random_resized")
    scratch = TrainConfig(backbone="MobileNetV3Small", weights="None")
    assert (scratch.weights, scratch.freeze_bn) == ("none", False)
    assert TrainConfig(backbone="cnn3", weights="runs/old").freeze_bn is True
    assert TrainConfig(backbone="ResNet50", freeze_bn=False).freeze_bn is False
    cnn3 = TrainConfig()
    assert (cnn3.weights, cnn3.freeze_bn, cnn3.augment_crop) == ("none", False, "random")
    assert TrainConfig(backbone="resnet50").backbone == "ResNet50"


@pytest.mark.parametrize("args, message", [
    (["--backbone", "vgg16"], "Unknown backbone 'vgg16'"),
    (["--weights", "imagenet"], "cnn3 has no ImageNet weights"),
    (["--head-warmup-steps", "-1"], "--head-warmup-steps must be an integer >= 0"),
    (["--backbone-lr-multiplier", "-0.5"], "--backbone-lr-multiplier must be >= 0"),
    (["--augment-crop", "centre"], "invalid choice: 'centre'"),
    (["--augment-crop", "random_resized"],
     "--augment-crop='random_resized' crops image files; omniglot is held in memory"),
    (["--augment-scale", "1"], "--augment-scale must be below 1"),
    (["--decoded-cache-mb", "-5"], "--decoded-cache-mb must be an integer >= 0, got -5"),
])
def test_bad_fine_tuning_options_are_clear_errors(args, message, tmp_path, capsys):
    try:
        code = cli.main(["train", *args, "--runs-dir", str(tmp_path), "--no-export",
                         "--no-plots"])
    except SystemExit as exit:  # argparse's own checks
        code = exit.code
    assert code == 2
    assert message in capsys.readouterr().err
    assert not os.listdir(tmp_path)


def test_resized_crop_and_raw_pixels_for_an_applications_backbone():
    from keras_dml.training.inputs import input_spec as _input_spec

    class Files:  # a split of image files
        images = None

    shape, preprocessing = _input_spec(Files(), 32, "MobileNetV3Small", "random_resized")
    assert shape == (32, 32, 3)
    assert (preprocessing.normalization, preprocessing.crop) == ("none", "random_resized")
    assert preprocessing.resize_size == 37
    assert _input_spec(Files(), 64, "cnn3")[1].normalization == "unit"


def test_mixed_precision_builds_float16_layers_and_restores_the_policy():
    import keras

    from keras_dml import training
    from keras_dml.training import model as training_model

    config = TrainConfig(backbone="MobileNetV3Small", weights="none", mixed_precision=True)
    with training_model.dtype_policy(config.mixed_precision):
        model = training.build_model(config, (32, 32, 3))
    assert keras.config.dtype_policy().name == "float32"
    assert model.get_layer("MobileNetV3Small").dtype_policy.name == "mixed_float16"
    assert model.get_layer("backbone_preprocessing").dtype_policy.name == "float32"
    assert model.outputs[0].dtype == "float32"


@pytest.mark.shared_data
@pytest.mark.slow
def test_cli_trains_an_applications_backbone_from_a_weights_path(tmp_path):
    import keras

    keras.utils.set_random_seed(0)
    network = keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                                  input_shape=(32, 32, 3))
    network.save_weights(tmp_path / "mnv3.weights.h5")
    command = [sys.executable, "-m", "keras_dml.cli", "train", "--backbone",
               "MobileNetV3Small", "--weights", str(tmp_path / "mnv3.weights.h5"),
               "--dataset", "cub200", "--data-dir", CUB, "--image-size", "32", "--epochs",
               "1", "--steps-per-epoch", "2", "--classes-per-batch", "4",
               "--head-warmup-steps", "1", "--backbone-lr-multiplier", "0.1", "--no-plots",
               "--no-export", "--runs-dir", str(tmp_path / "runs"), "--run-name", "mnv3"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "MobileNetV3Small" in done.stdout and "mnv3.weights.h5" in done.stdout
    config = json.loads((tmp_path / "runs" / "mnv3" / "config.json").read_text())
    assert config["freeze_bn"] is True and config["augment_crop"] == "random_resized"
    model = keras.saving.load_model(tmp_path / "runs" / "mnv3" / "model.keras",
                                    compile=False)
    bn = model.get_layer("MobileNetV3Small").get_layer("conv_bn")
    assert bn.trainable is False
    import numpy as np

    np.testing.assert_array_equal(  # frozen statistics: still those of the file
        bn.moving_mean.numpy(), network.get_layer("conv_bn").moving_mean.numpy())


def test_in_memory_images_reach_an_applications_backbone_as_raw_pixels():
    import numpy as np

    from keras_dml.training import array_transform

    class Arrays:  # a split held in memory
        images = np.full((2, 8, 8), 255, np.uint8)

    x, _ = array_transform(Arrays(), (8, 8, 1), pixel_max=255.0)(Arrays.images, None)
    assert float(x.numpy().max()) == 255.0
    x, _ = array_transform(Arrays(), (8, 8, 1))(Arrays.images, None)
    assert float(x.numpy().max()) == 1.0


def test_a_warm_start_takes_the_head_when_its_shape_matches(tmp_path, capsys):
    import numpy as np

    from keras_dml import training

    source = training.build_model(TrainConfig(width=8, embedding_dim=16, seed=1), (28, 28, 1))
    (tmp_path / "run").mkdir()
    source.save(tmp_path / "run" / "model.keras")
    head = source.get_layer("embedding").get_weights()
    warm = training.build_model(TrainConfig(width=8, embedding_dim=16, weights=str(
        tmp_path / "run")), (28, 28, 1))
    for a, b in zip(warm.get_layer("embedding").get_weights(), head):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(warm.get_layer("conv0").get_weights(),
                    source.get_layer("conv0").get_weights()):
        np.testing.assert_array_equal(a, b)
    assert warm.get_layer("bn0").trainable is False  # pretrained: BatchNorm frozen
    wider = training.build_model(TrainConfig(width=8, embedding_dim=32, weights=str(
        tmp_path / "run")), (28, 28, 1))
    assert wider.get_layer("embedding").get_weights()[0].shape == (72, 32)
    assert "the embedding head starts afresh" in capsys.readouterr().out
