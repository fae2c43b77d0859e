"""GeneralizedMeanPooling, EmbeddingHead(pooling="gem", embedding_regularizer=...), LpNorm."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.layers import regularizers
from keras_dml.layers import EmbeddingHead, GeneralizedMeanPooling


def test_gem_is_the_generalised_mean_and_learns_p():
    x = np.abs(np.random.default_rng(0).normal(size=(2, 3, 4, 5))).astype("float32")
    layer = GeneralizedMeanPooling(p=3.0)
    expected = np.mean(np.maximum(x, 1e-6) ** 3, axis=(1, 2)) ** (1 / 3)
    np.testing.assert_allclose(layer(x), expected, rtol=1e-5)
    np.testing.assert_allclose(GeneralizedMeanPooling(p=1.0)(x), x.mean(axis=(1, 2)), rtol=1e-5)
    with tf.GradientTape() as tape:
        value = tf.reduce_sum(layer(x))
    assert float(tape.gradient(value, layer.p)) != 0.0
    assert [w.name for w in layer.trainable_weights] == ["p"]
    with pytest.raises(ValueError, match="p must be >= 1"):
        GeneralizedMeanPooling(p=0.5)


def test_embedding_head_gem_saves_and_loads(tmp_path):
    inputs = keras.Input((6, 6, 4))
    head = EmbeddingHead(8, pooling="gem")
    model = keras.Model(inputs, head(inputs))
    head.gem.p.assign(4.5)
    x = np.random.default_rng(1).normal(size=(3, 6, 6, 4)).astype("float32")
    path = str(tmp_path / "gem.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6)
    assert float(loaded.layers[-1].gem.p) == 4.5
    policy = keras.config.dtype_policy()
    try:
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        out = EmbeddingHead(8, pooling="gem")(tf.constant(x, tf.float16))
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    assert out.dtype == tf.float32 and np.all(np.isfinite(out))


def test_lp_norm_regulariser_on_the_projection():
    x = np.random.default_rng(2).normal(size=(4, 5)).astype("float32")
    np.testing.assert_allclose(regularizers.LpNorm(0.1)(x),
                               0.1 * np.linalg.norm(x, axis=1).sum(), rtol=1e-5)
    np.testing.assert_allclose(regularizers.LpNorm(1.0, p=1, power=2)(x),
                               (np.abs(x).sum(1) ** 2).sum(), rtol=1e-4)
    inputs = keras.Input((5,))
    head = EmbeddingHead(3, embedding_regularizer=regularizers.LpNorm(0.5))
    model = keras.Model(inputs, head(inputs))
    model(x)
    raw = head.projection(x)
    # Keras divides by the batch size: the term is PML's batch mean
    np.testing.assert_allclose(float(model.losses[0]),
                               0.5 * np.linalg.norm(raw, axis=1).mean(), rtol=1e-5)
    clone = EmbeddingHead.from_config(head.get_config())
    assert isinstance(clone.embedding_regularizer, regularizers.LpNorm)
    assert clone.embedding_regularizer.weight == 0.5
