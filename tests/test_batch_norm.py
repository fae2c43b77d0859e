import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import backbones
from keras_dml.layers import FusedBatchNormalization

# A mean far from 0, as after a convolution of non-negative images.
IMAGES = (np.random.default_rng(0).normal(size=(6, 5, 4, 3)) + 2.0).astype("float32")


def _pair(**kwargs):
    """Keras' layer and ours with the same (non-trivial) weights."""
    layers = [keras.layers.BatchNormalization(**kwargs), FusedBatchNormalization(**kwargs)]
    rng = np.random.default_rng(1)
    weights = None
    for layer in layers:
        layer.build(IMAGES.shape)
        if weights is None:
            weights = [rng.normal(size=w.shape).astype("float32") if "variance" not in w.path
                       else rng.uniform(0.5, 2.0, size=w.shape).astype("float32")
                       for w in layer.weights]
        layer.set_weights(weights)
    return layers


def _train_call(layer, x):
    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        objective = tf.reduce_sum(tf.sin(3.0 * y))  # a gradient that is not constant
    grads = tape.gradient(objective, [x] + layer.trainable_weights)
    return y.numpy(), [g.numpy() for g in grads]


@pytest.mark.parametrize("kwargs", [{}, {"momentum": 0.9, "epsilon": 1e-5},
                                    {"center": False}, {"scale": False}])
def test_training_outputs_gradients_and_moving_statistics_equal_keras(kwargs):
    ours, theirs = _pair(**kwargs)[::-1]
    for step in range(3):
        x = IMAGES * (1.0 + step)
        y_ours, g_ours = _train_call(ours, x)
        y_theirs, g_theirs = _train_call(theirs, x)
        np.testing.assert_allclose(y_ours, y_theirs, atol=2e-5)
        for a, b in zip(g_ours, g_theirs):
            np.testing.assert_allclose(a, b, atol=2e-4 * np.abs(b).max())
    for a, b in zip(ours.non_trainable_weights, theirs.non_trainable_weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5)
    np.testing.assert_allclose(ours(IMAGES, training=False), theirs(IMAGES, training=False),
                               atol=2e-5)


def test_moving_variance_is_the_biased_batch_variance_as_in_keras():
    layer = FusedBatchNormalization(momentum=0.0)
    layer(IMAGES, training=True)
    np.testing.assert_allclose(layer.moving_mean.numpy(), IMAGES.mean(axis=(0, 1, 2)), rtol=1e-5)
    np.testing.assert_allclose(layer.moving_variance.numpy(), IMAGES.var(axis=(0, 1, 2)),
                               rtol=1e-4)


def test_frozen_layer_normalises_with_moving_statistics_and_does_not_update_them():
    ours, theirs = _pair()[::-1]
    for layer in (ours, theirs):
        layer.trainable = False
    before = [w.numpy() for w in ours.non_trainable_weights]
    np.testing.assert_allclose(ours(IMAGES, training=True), theirs(IMAGES, training=True),
                               atol=2e-5)
    for a, b in zip(before, ours.non_trainable_weights):
        np.testing.assert_array_equal(a, b.numpy())


@pytest.mark.parametrize("shape, kwargs", [((6, 3), {}), ((6, 3, 4), {}),
                                           ((6, 5, 4, 3), {"axis": 1})])
def test_inputs_the_kernel_does_not_cover_take_keras_path(shape, kwargs):
    x = np.random.default_rng(2).normal(size=shape).astype("float32")
    ours = FusedBatchNormalization(**kwargs)
    theirs = keras.layers.BatchNormalization(**kwargs)
    np.testing.assert_allclose(ours(x, training=True), theirs(x, training=True), atol=1e-6)
    np.testing.assert_allclose(ours.moving_variance.numpy(), theirs.moving_variance.numpy(),
                               rtol=1e-6)


def test_graph_and_xla_match_eager():
    layer = FusedBatchNormalization(momentum=0.5)
    layer.build(IMAGES.shape)
    eager = layer(IMAGES, training=True).numpy()
    for jit in (False, True):
        fresh = FusedBatchNormalization(momentum=0.5)
        fresh.build(IMAGES.shape)
        call = tf.function(lambda x, fresh=fresh: fresh(x, training=True), jit_compile=jit)
        np.testing.assert_allclose(call(tf.constant(IMAGES)).numpy(), eager, atol=1e-5)
        np.testing.assert_allclose(fresh.moving_mean.numpy(), layer.moving_mean.numpy(),
                                   rtol=1e-6)


def test_mixed_precision_computes_in_float32_and_returns_float16(mixed_precision):
    layer = FusedBatchNormalization()
    y = layer(IMAGES.astype("float16"), training=True)
    assert y.dtype == "float16" and layer.moving_variance.dtype == "float32"
    reference = keras.layers.BatchNormalization(dtype="float32")(IMAGES, training=True)
    np.testing.assert_allclose(y.numpy().astype("float32"), reference, atol=1e-2)


def test_saved_and_loaded_with_the_model(tmp_path):
    inputs = keras.Input(IMAGES.shape[1:])
    model = keras.Model(inputs, FusedBatchNormalization(momentum=0.8)(inputs))
    model(IMAGES, training=True)  # moves the statistics
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(restored.layers[-1], FusedBatchNormalization)
    assert restored.layers[-1].get_config()["momentum"] == 0.8
    np.testing.assert_allclose(restored(IMAGES), model(IMAGES), atol=1e-6)


def test_protocol_backbone_uses_the_fused_layer():
    model = backbones.cnn3((28, 28, 1))
    assert sum(isinstance(layer, FusedBatchNormalization) for layer in model.layers) == 3
