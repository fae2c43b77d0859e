"""Tests of keras_dml.layers.MultiLevelEmbedding and keras_dml.backbones.multi_level_embedder."""

import keras
import numpy as np
import pytest

import keras_dml
from keras_dml.backbones import RESNET50_LEVELS, multi_level_embedder
from keras_dml.layers import MultiLevelEmbedding
from keras_dml.models import DMLModel


@pytest.fixture(scope="module")
def resnet():
    keras.utils.set_random_seed(0)
    return keras.applications.ResNet50(weights=None, include_top=False,
                                       input_shape=(64, 64, 3))


def _small_backbone():
    inputs = keras.Input((16, 16, 3))
    low = keras.layers.Conv2D(4, 3, padding="same", activation="relu", name="low")(inputs)
    mid = keras.layers.Conv2D(6, 3, strides=2, padding="same", activation="relu",
                              name="mid")(low)
    high = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu",
                               name="high")(mid)
    return keras.Model(inputs, high, name="small")


def test_resnet50_levels_give_unit_embeddings_from_own_heads(resnet):
    model = multi_level_embedder(resnet, RESNET50_LEVELS, dims=[16, 8, 32])
    assert isinstance(model, DMLModel)
    x = np.random.default_rng(0).uniform(size=(3, 64, 64, 3)).astype("float32")
    embeddings = np.asarray(model(x))
    assert embeddings.shape == (3, 56) and embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)

    layer = model.get_layer("multi_level_embedding")
    # One head per level, each projecting that level's channels (512, 1024, 2048).
    kernels = [head.projection.kernel.shape for head in layer.heads]
    assert kernels == [(512, 16), (1024, 8), (2048, 32)]
    # The embedding is exactly: each level pooled, projected, L2-normalised; concat; L2.
    maps = keras.Model(resnet.input, [resnet.get_layer(n).output for n in RESNET50_LEVELS])(x)
    parts = []
    for head, feature_map in zip(layer.heads, maps):
        z = np.mean(np.asarray(feature_map), axis=(1, 2)) @ np.asarray(head.projection.kernel)
        z = z + np.asarray(head.projection.bias)
        parts.append(z / np.linalg.norm(z, axis=1, keepdims=True))
    expected = np.concatenate(parts, axis=1)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    np.testing.assert_allclose(embeddings, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_resnet50_multilevel_trains_with_ice(resnet):
    model = multi_level_embedder(resnet, RESNET50_LEVELS, dims=8)
    model.compile(optimizer=keras.optimizers.SGD(0.05),
                  loss=keras_dml.losses.InstanceCrossEntropy(scale=16.0))
    x = np.random.default_rng(1).uniform(size=(8, 64, 64, 3)).astype("float32")
    y = np.repeat(np.arange(4), 2)
    heads = model.get_layer("multi_level_embedding").heads
    before = [np.asarray(h.projection.kernel).copy() for h in heads]
    stem = np.asarray(resnet.get_layer("conv1_conv").kernel).copy()
    history = model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for head, kernel in zip(heads, before):  # every level's head receives a gradient
        assert not np.allclose(np.asarray(head.projection.kernel), kernel)
    assert not np.allclose(np.asarray(resnet.get_layer("conv1_conv").kernel), stem)


def test_layer_on_any_backbone_and_save_load(tmp_path):
    backbone = _small_backbone()
    model = multi_level_embedder(backbone, ["low", "mid", "high"], dims=4, pooling="max",
                                 normalize_levels=False)
    x = np.random.default_rng(2).normal(size=(5, 16, 16, 3)).astype("float32")
    expected = np.asarray(model(x))
    assert expected.shape == (5, 12)
    path = str(tmp_path / "multilevel.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(np.asarray(loaded(x)), expected, rtol=1e-6, atol=1e-6)
    layer = loaded.get_layer("multi_level_embedding")
    assert layer.get_config()["dims"] == [4, 4, 4] and layer.pooling == "max"
    assert not layer.normalize_levels


def test_plain_keras_model_class_and_mixed_precision():
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        backbone = _small_backbone()
        model = multi_level_embedder(backbone, ["mid", "high"], dims=[3, 5],
                                     model_class=keras.Model)
        out = model(np.ones((2, 16, 16, 3), "float32"))
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert isinstance(model, keras.Model) and not isinstance(model, DMLModel)
    assert out.dtype == "float32" and out.shape == (2, 8)
    np.testing.assert_allclose(np.linalg.norm(np.asarray(out), axis=1), 1.0, rtol=1e-3)


def test_bad_arguments_raise_value_error():
    backbone = _small_backbone()
    with pytest.raises(ValueError, match="no layer"):
        multi_level_embedder(backbone, ["low", "nope"])
    with pytest.raises(ValueError, match="one size per level"):
        multi_level_embedder(backbone, ["low", "mid"], dims=[4, 4, 4])
    with pytest.raises(ValueError, match="non-empty list"):
        multi_level_embedder(backbone, "low")
    with pytest.raises(ValueError, match="non-empty list"):
        MultiLevelEmbedding(8)
    layer = MultiLevelEmbedding([4, 4])
    with pytest.raises(ValueError, match="2 heads"):
        layer([np.ones((2, 4, 4, 3), "float32")] * 3)
