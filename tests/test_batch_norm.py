"""`keras_dml.layers.FusedBatchNormalization` on the running Keras backend (TensorFlow's
fused kernel, JAX's custom VJP, PyTorch's native kernel): Keras' `BatchNormalization`
values, gradients and moving statistics. NumPy inputs."""

import keras
import numpy as np
import pytest

from keras_dml import backbones
from keras_dml.backend import cpu
from keras_dml.layers import FusedBatchNormalization
from layer_checks import keras_and_ours, numpy, stateless_gradients

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral(quick_on_tensorflow=True)

# A mean far from 0, as after a convolution of non-negative images.
IMAGES = (np.random.default_rng(0).normal(size=(6, 5, 4, 3)) + 2.0).astype("float32")


def _pair(**kwargs):
    """Keras' layer and ours with the same (non-trivial) weights."""
    return keras_and_ours(keras.layers.BatchNormalization(**kwargs),
                          FusedBatchNormalization(**kwargs), IMAGES.shape)


def _train_call(layer, x):
    """(y, gradient of sum(sin(3 y)) for x and each trainable weight, new moving
    statistics) of one training call, stateless, by the backend's autodiff."""
    return stateless_gradients(layer, x, lambda y: keras.ops.sin(3.0 * y),  # not constant
                               training=True)


@pytest.mark.parametrize("kwargs", [{}, {"momentum": 0.9, "epsilon": 1e-5},
                                    {"center": False}, {"scale": False}])
def test_training_outputs_gradients_and_moving_statistics_equal_keras(kwargs):
    ours, theirs = _pair(**kwargs)[::-1]
    for step in range(3):
        x = IMAGES * (1.0 + step)
        y_ours, g_ours, moving_ours = _train_call(ours, x)
        y_theirs, g_theirs, moving_theirs = _train_call(theirs, x)
        np.testing.assert_allclose(y_ours, y_theirs, atol=2e-5)
        for a, b in zip(g_ours, g_theirs):
            np.testing.assert_allclose(a, b, atol=2e-4 * np.abs(b).max())
        for a, b in zip(moving_ours, moving_theirs):
            np.testing.assert_allclose(a, b, rtol=1e-5)


def test_moving_statistics_follow_keras_over_stateful_calls():
    ours, theirs = _pair(momentum=0.5)[::-1]
    for step in range(3):
        for layer in (ours, theirs):
            layer(IMAGES * (1.0 + step), training=True)
    for a, b in zip(ours.non_trainable_weights, theirs.non_trainable_weights):
        np.testing.assert_allclose(numpy(a), numpy(b), rtol=1e-5)
    np.testing.assert_allclose(numpy(ours(IMAGES, training=False)),
                               numpy(theirs(IMAGES, training=False)), atol=2e-5)


def test_moving_variance_is_the_biased_batch_variance_as_in_keras():
    layer = FusedBatchNormalization(momentum=0.0)
    layer(IMAGES, training=True)
    np.testing.assert_allclose(numpy(layer.moving_mean), IMAGES.mean(axis=(0, 1, 2)),
                               rtol=1e-5)
    np.testing.assert_allclose(numpy(layer.moving_variance), IMAGES.var(axis=(0, 1, 2)),
                               rtol=1e-4)


def test_a_large_mean_keeps_the_variance_exact():
    # One-pass E[x^2] - E[x]^2 (Keras' own path on PyTorch) would lose the variance to
    # cancellation at this offset.
    x = (np.random.default_rng(4).normal(size=(8, 6, 6, 2)) + 3e3).astype("float32")
    layer = FusedBatchNormalization(momentum=0.0)
    y = numpy(layer(x, training=True))
    np.testing.assert_allclose(numpy(layer.moving_variance),
                               x.astype("float64").var(axis=(0, 1, 2)), rtol=1e-3)
    np.testing.assert_allclose(y.std(axis=(0, 1, 2)), 1.0, rtol=1e-3)


def test_frozen_layer_normalises_with_moving_statistics_and_does_not_update_them():
    ours, theirs = _pair()[::-1]
    for layer in (ours, theirs):
        layer.trainable = False
    before = [numpy(w) for w in ours.non_trainable_weights]
    np.testing.assert_allclose(numpy(ours(IMAGES, training=True)),
                               numpy(theirs(IMAGES, training=True)), atol=2e-5)
    for a, b in zip(before, ours.non_trainable_weights):
        np.testing.assert_array_equal(a, numpy(b))


@pytest.mark.parametrize("shape, kwargs", [((6, 3), {}), ((6, 3, 4), {}),
                                           ((6, 5, 4, 3), {"axis": 1})])
def test_inputs_the_fused_path_does_not_cover_take_keras_path(shape, kwargs):
    x = np.random.default_rng(2).normal(size=shape).astype("float32")
    ours = FusedBatchNormalization(**kwargs)
    theirs = keras.layers.BatchNormalization(**kwargs)
    np.testing.assert_allclose(numpy(ours(x, training=True)),
                               numpy(theirs(x, training=True)), atol=1e-6)
    np.testing.assert_allclose(numpy(ours.moving_variance), numpy(theirs.moving_variance),
                               rtol=1e-6)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function and XLA")
def test_graph_and_xla_match_eager():
    import tensorflow as tf

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
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    assert layer.moving_variance.dtype == "float32"
    reference = keras.layers.BatchNormalization(dtype="float32")(IMAGES, training=True)
    np.testing.assert_allclose(numpy(y).astype("float32"), numpy(reference), atol=1e-2)


def test_saved_and_loaded_with_the_model(tmp_path):
    inputs = keras.Input(IMAGES.shape[1:])
    model = keras.Model(inputs, FusedBatchNormalization(momentum=0.8)(inputs))
    model(IMAGES, training=True)  # moves the statistics
    model.save(tmp_path / "m.keras")
    restored = keras.models.load_model(tmp_path / "m.keras")
    assert isinstance(restored.layers[-1], FusedBatchNormalization)
    assert restored.layers[-1].get_config()["momentum"] == 0.8
    np.testing.assert_allclose(numpy(restored(IMAGES)), numpy(model(IMAGES)), atol=1e-6)


def test_protocol_backbone_uses_the_fused_layer():
    model = backbones.cnn3((28, 28, 1))
    assert sum(isinstance(layer, FusedBatchNormalization) for layer in model.layers) == 3


def test_one_value_per_channel_takes_keras_path():
    x = np.full((1, 1, 1, 3), 2.0, "float32")
    y = FusedBatchNormalization(momentum=0.0)(x, training=True)
    np.testing.assert_allclose(numpy(y), 0.0, atol=1e-6)


def test_tensorflow_takes_keras_ops_where_onednn_runs_as_avx2(monkeypatch):
    """The same values either way; on TensorFlow the form follows the CPU kind."""
    layer = FusedBatchNormalization(momentum=0.0)
    fused = numpy(layer(IMAGES, training=True))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "1")
    keras_form = numpy(layer(IMAGES, training=True))
    np.testing.assert_allclose(keras_form, fused, atol=1e-4)
    taken = layer._fusable(keras.ops.convert_to_tensor(IMAGES), None)
    if keras.backend.backend() == "tensorflow" and cpu.kind("onednn") == "avx2":
        assert taken is False
