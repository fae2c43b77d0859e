"""Backbones: the Keras Applications families, their preprocessing inside the model,
weights from Keras' cache (offline), from a path and from a run."""

import os
import urllib.error

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import backbones
from keras_dml.training import config as training_config
from keras_dml.layers import BackbonePreprocessing, EmbeddingHead
from keras_dml.models import DMLModel
from layer_checks import relu_then_pool

SLOW_FAMILIES = [name for name in backbones.FAMILIES if name != "MobileNetV3Small"]


def _pixels(n=2, size=32, seed=0):
    return np.random.default_rng(seed).uniform(0, 255, (n, size, size, 3)).astype("float32")


@pytest.mark.parametrize("name", ["MobileNetV3Small"] + [
    pytest.param(name, marks=pytest.mark.slow) for name in SLOW_FAMILIES])
def test_every_family_builds_a_feature_map_at_its_smallest_size(name):
    size = backbones.FAMILIES[name].min_size
    backbone = backbones.get(name.lower(), (size, size, 3))
    features = backbone(_pixels(size=size))
    assert features.shape[0] == 2 and len(features.shape) == 4
    assert np.isfinite(keras.ops.convert_to_numpy(features)).all()
    assert isinstance(backbone.layers[1], BackbonePreprocessing)


def test_names_are_case_insensitive_and_resnet50_is_an_alias():
    assert training_config.backbone_name("mobilenetv3small") == "MobileNetV3Small"
    assert training_config.backbone_name("resnet50") == "ResNet50"
    assert training_config.BACKBONES == backbones.BACKBONES
    with pytest.raises(ValueError, match="Unknown backbone 'vgg16'"):
        backbones.get("vgg16", (32, 32, 3))


def test_family_table_names_keras_constructors_and_modules():
    for name, family in backbones.FAMILIES.items():
        assert callable(getattr(keras.applications, name))
        assert callable(getattr(keras.applications, family.module).preprocess_input)


def test_too_small_images_and_width_are_clear_errors():
    with pytest.raises(ValueError, match="InceptionV3 needs images of at least 75"):
        backbones.get("InceptionV3", (64, 64, 3))
    with pytest.raises(ValueError, match="width=8 applies to cnn3 and convnet"):
        backbones.get("MobileNetV3Small", (32, 32, 3), width=8)
    with pytest.raises(ValueError, match="cnn3 has no ImageNet weights"):
        backbones.get("cnn3", (28, 28, 1), weights="imagenet")


@pytest.mark.parametrize("family", ["ResNet50", "ResNet50V2", "InceptionV3",
                                    "EfficientNetV2B0", "ConvNeXtTiny", "MobileNetV3Small"])
def test_preprocessing_inside_equals_keras_preprocess_input_outside(family):
    x = _pixels(size=8)
    module = getattr(keras.applications, backbones.FAMILIES[family].module)
    expected = module.preprocess_input(x.copy())
    inside = keras.ops.convert_to_numpy(BackbonePreprocessing(family)(x))
    np.testing.assert_allclose(inside, expected, rtol=0, atol=1e-4)
    if family == "ResNet50":  # not the identity: BGR minus the ImageNet mean
        assert not np.allclose(inside, x)


def test_backbone_preprocessing_round_trips_through_a_keras_file(tmp_path):
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, BackbonePreprocessing("ResNet50")(inputs))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    x = _pixels(size=8)
    np.testing.assert_array_equal(loaded(x), model(x))
    with pytest.raises(ValueError, match="Unknown backbone family 'VGG'"):
        BackbonePreprocessing("VGG")


# -- ImageNet weights through Keras' own cache, offline -------------------------------

@pytest.fixture
def offline_keras_home(tmp_path, monkeypatch):
    """Keras' cache in a temporary folder, and no network for `get_file`."""
    from keras.src.backend import config
    from keras.src.utils import file_utils

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("[Errno -2] Name or service not known")

    monkeypatch.setattr(config, "_KERAS_DIR", str(tmp_path))
    monkeypatch.setattr(file_utils, "urlretrieve", no_network)
    return tmp_path


def test_offline_imagenet_error_names_the_file_the_cache_and_weights_path(offline_keras_home):
    with pytest.raises(backbones.WeightsUnavailableError) as caught:
        backbones.get("MobileNetV3Small", (32, 32, 3), weights="imagenet")
    message = str(caught.value)
    assert isinstance(caught.value, FileNotFoundError)
    assert "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5" in message
    assert os.path.join(str(offline_keras_home), "models") in message
    assert "$KERAS_HOME/models" in message and "--weights PATH" in message
    assert "Name or service not known" in message


def _keras_imagenet_file(folder, seed=1):
    """A MobileNetV3Small no-top file in the legacy h5 layout of Keras' download,
    from a random model; returns (path, that model's weights)."""
    from keras.src.legacy.saving import legacy_h5_format

    keras.utils.set_random_seed(seed)
    network = keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                                  input_shape=(32, 32, 3))
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5")
    with h5py.File(path, "w") as f:
        legacy_h5_format.save_weights_to_hdf5_group(f, network)
    return path, network.get_weights()


def test_imagenet_weights_load_from_a_seeded_keras_cache(offline_keras_home):
    path, expected = _keras_imagenet_file(offline_keras_home / "models")
    size_before = os.path.getsize(path)
    with pytest.warns(UserWarning, match="not the file Keras publishes"):
        backbone = backbones.get("MobileNetV3Small", (64, 64, 3), weights="imagenet")
    loaded = backbone.get_layer("MobileNetV3Small").get_weights()
    assert len(loaded) == len(expected)
    for a, b in zip(loaded, expected):
        np.testing.assert_array_equal(a, b)
    assert os.path.getsize(path) == size_before  # kept, not re-downloaded or deleted


def _random_network(seed=3):
    keras.utils.set_random_seed(seed)
    return keras.applications.MobileNetV3Small(include_top=False, weights=None,
                                               input_shape=(32, 32, 3))


def _assert_loaded(backbone, network):
    loaded = backbone.get_layer("MobileNetV3Small").get_weights()
    assert len(loaded) == len(network.get_weights())
    for a, b in zip(loaded, network.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_weights_from_a_weights_file(tmp_path):
    network = _random_network()
    network.save_weights(tmp_path / "b.weights.h5")
    _assert_loaded(backbones.get("MobileNetV3Small", (48, 48, 3),
                                 weights=tmp_path / "b.weights.h5"), network)
    with pytest.raises(FileNotFoundError, match="no such file"):
        backbones.get("MobileNetV3Small", (32, 32, 3), weights=tmp_path / "missing.keras")
    with pytest.raises(ValueError, match="expected a .weights.h5"):
        (tmp_path / "notes.txt").write_text("x")
        backbones.get("MobileNetV3Small", (32, 32, 3), weights=tmp_path / "notes.txt")


@pytest.mark.slow
def test_weights_from_a_keras_model_of_the_backbone(tmp_path):
    network = _random_network()
    network.save(tmp_path / "b.keras")
    _assert_loaded(backbones.get("MobileNetV3Small", (48, 48, 3),
                                 weights=tmp_path / "b.keras"), network)
    with pytest.raises(ValueError, match="has no layer 'MobileNetV3Small'"):
        backbones.get("MobileNetV3Small", (32, 32, 3), weights=_cnn3_run(tmp_path))


def _cnn3_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    backbone = backbones.get("cnn3", (28, 28, 1), width=8)
    model = DMLModel(backbone.input, EmbeddingHead(16, name="embedding")(backbone.output))
    model.save(run / "model.keras")
    return run


def test_a_run_folder_warm_starts_cnn3(tmp_path):
    run = _cnn3_run(tmp_path)
    source = keras.saving.load_model(run / "model.keras", compile=False)
    backbone = backbones.get("cnn3", (28, 28, 1), width=8, weights=run)
    for layer in backbone.layers:
        for a, b in zip(layer.get_weights(), source.get_layer(layer.name).get_weights()):
            np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="layer 'conv0' holds weights of shapes"):
        backbones.get("cnn3", (28, 28, 1), width=16, weights=run)


@pytest.mark.shared_data
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="the SavedModel export traces the model in TensorFlow")
def test_exported_saved_model_takes_image_bytes_and_agrees_with_the_embedder(tmp_path):
    from conftest import SHARED_DATASETS

    from keras_dml.data import Preprocessing
    from keras_dml.data.preprocessing import decode_image
    from keras_dml.export import export_embedder

    folder = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")
    species = sorted(os.listdir(folder))[:2]
    paths = [os.path.join(folder, s, f) for s in species
             for f in sorted(os.listdir(os.path.join(folder, s)))[:3]]
    encoded = [open(p, "rb").read() for p in paths]
    backbone = backbones.get("MobileNetV3Small", (32, 32, 3))
    model = DMLModel(backbone.input, EmbeddingHead(16, name="embedding")(backbone.output))
    preprocessing = Preprocessing(image_size=32, resize_size=37, normalization="none")
    images = tf.stack([preprocessing.eval(decode_image(b)) for b in encoded])
    # a random MobileNetV3's features vanish (~1e-11) with its initial BatchNorm
    # statistics: set them to these images' (momentum 0, one training-mode pass)
    norms = [layer for layer in model.get_layer("MobileNetV3Small").layers
             if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in norms:
        layer.momentum = 0.0
    model(images, training=True)
    export_dir = export_embedder(model.embedder(), str(tmp_path / "sm"),
                                 preprocessing=preprocessing)
    served = tf.saved_model.load(export_dir).signatures["serving_default"]
    got = served(image_bytes=tf.constant(encoded))["embedding"].numpy()
    expected = keras.ops.convert_to_numpy(model.embedder()(images))
    assert float(images.numpy().max()) > 1.5  # raw pixels: the model normalises inside
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=0)


# -- the zero-shot baseline of an Applications family: keras-dml evaluate / index --backbone


def _cli(argv, capsys):
    from keras_dml import cli

    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_zero_shot_without_imagenet_weights_suggests_what_works(offline_keras_home, tmp_path,
                                                                capsys):
    from keras_dml import cli
    from serve_fixtures import colour_photos

    photos = colour_photos(tmp_path / "photos")
    assert cli.main(["evaluate", "--backbone", "mobilenetv3small", "--images",
                     str(photos)]) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message
    assert "weights_mobilenet_v3_small_224_1.0_float_no_top_v2.h5" in message
    assert os.path.join(str(offline_keras_home), "models") in message
    assert "https://" in message  # where Keras downloads it from
    assert "Put that file there, or evaluate a trained run (RUN)" in message
    assert "--weights" not in message  # evaluate has no --weights
    assert cli.main(["index", "--backbone", "cnn3", "--images", str(photos), "--output",
                     str(tmp_path / "index")]) == 2
    assert "--backbone takes a pretrained backbone, hub:PRESET or one of ResNet50" in \
        capsys.readouterr().err


@pytest.mark.slow  # MobileNetV3Small at 224 x 224 embeds 9 photos four times: ~15 s
def test_zero_shot_evaluate_index_and_search_with_imagenet_weights_from_the_cache(
        offline_keras_home, tmp_path, capsys):
    import json

    from serve_fixtures import colour_photos

    _keras_imagenet_file(offline_keras_home / "models")
    photos = colour_photos(tmp_path / "photos")
    out = _cli(["evaluate", "--backbone", "mobilenetv3small", "--images", photos,
                "--no-report", "--output", tmp_path / "evaluation"], capsys)
    assert "9 images from" in out and "exact ranking" in out
    metrics = json.loads((tmp_path / "evaluation" / "metrics.json").read_text())
    assert metrics["results"][0]["metrics"]["num_queries"] == 9
    out = _cli(["index", "--backbone", "MobileNetV3Small", "--images", photos, "--output",
                tmp_path / "index"], capsys)
    assert "9 items, dimension 576" in out  # MobileNetV3Small's last feature map
    provenance = json.loads((tmp_path / "index" / "index.json").read_text())["provenance"]
    assert provenance["run"] == "MobileNetV3Small" and provenance["model_fingerprint"]
    # search reloads the recorded backbone (its fingerprint checked) from the same cache
    found = _cli(["search", tmp_path / "index", photos / "owl" / "1.png", "--k", 1], capsys)
    assert os.path.join("owl", "1.png") in found and "score 1.0000" in found


@pytest.mark.parametrize("name, shape", [("cnn3", (28, 28, 1)), ("cnn3", (16, 16, 3)),
                                         ("convnet", (16, 16, 3))])
def test_pooling_before_relu_is_the_textbook_network(name, shape):
    keras.utils.set_random_seed(0)
    model = backbones.get(name, shape)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert "TiledMaxPooling2D" in kinds and kinds[kinds.index("TiledMaxPooling2D") + 1] == "ReLU"
    x = tf.constant(np.random.default_rng(0).normal(size=(8,) + shape).astype("float32"))
    for training in (False, True):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(x)
            ours, textbook = model(x, training=training), relu_then_pool(model, x, training)
            ours_sum, textbook_sum = tf.reduce_sum(ours ** 2), tf.reduce_sum(textbook ** 2)
        np.testing.assert_array_equal(ours.numpy(), textbook.numpy())
        for ours_grad, textbook_grad in zip(
                tape.gradient(ours_sum, [x] + model.trainable_weights),
                tape.gradient(textbook_sum, [x] + model.trainable_weights)):
            np.testing.assert_allclose(ours_grad.numpy(), textbook_grad.numpy(), rtol=1e-5,
                                       atol=1e-6)
