"""`keras_dml.layers.convolution.ShiftedConv2D` on the running Keras backend (its shifted path
on JAX and TensorFlow): Keras' `Conv2D` values and gradients. NumPy inputs."""

import keras
import numpy as np
import pytest

from keras_dml.layers.convolution import ShiftedConv2D
from layer_checks import assert_saves_and_loads, keras_and_ours, numpy, stateless_gradients

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def _pair(options, input_shape):
    """Keras' layer and ours with the same weights."""
    return keras_and_ours(keras.layers.Conv2D(**options), ShiftedConv2D(**options),
                          input_shape)


def _value_and_gradients(layer, x):
    """(output, [gradient for x, for the kernel, for the bias if any]) of
    sum(output * fixed weights)."""
    upstream = keras.ops.convert_to_tensor(np.random.default_rng(2).normal(
        size=layer.compute_output_shape(x.shape)), "float32")
    y, gradients, _ = stateless_gradients(layer, x, lambda y: y * upstream)
    return y, gradients


@pytest.mark.parametrize("options, channels", [
    ({"filters": 4, "kernel_size": 3, "padding": "same"}, 1),  # the shifted path on JAX
    ({"filters": 3, "kernel_size": (2, 3), "padding": "same"}, 1),  # an odd pixel to pad
    ({"filters": 2, "kernel_size": 3, "padding": "valid", "use_bias": False}, 1),
    ({"filters": 2, "kernel_size": 3, "padding": "same", "activation": "relu"}, 1),
    ({"filters": 2, "kernel_size": 3, "padding": "same"}, 3),  # Keras' path: 3 channels
    ({"filters": 2, "kernel_size": 3, "strides": 2}, 1),  # Keras' path: stride 2
    ({"filters": 2, "kernel_size": 3, "strides": 2, "padding": "same"}, 3),  # Keras' everywhere
    ({"filters": 2, "kernel_size": 2, "dilation_rate": 2, "padding": "same"}, 3),
])
def test_values_and_gradients_are_keras_conv2d(options, channels):
    x = np.random.default_rng(0).normal(size=(3, 7, 8, channels)).astype("float32")
    ours, theirs = _pair(options, x.shape)[::-1]
    shifted = keras.backend.backend() != "torch" and channels == 1 and "strides" not in options
    assert ours._shifted(keras.ops.convert_to_tensor(x)) == shifted
    padded_alike = options.get("padding") != "same" or (  # PyTorch pads without a copy
        "strides" not in options and options["kernel_size"] != (2, 3))
    assert ours._channels_last_view() == (keras.backend.backend() == "torch" and padded_alike)
    value, gradients = _value_and_gradients(ours, x)
    expected_value, expected_gradients = _value_and_gradients(theirs, x)
    assert value.shape == expected_value.shape
    np.testing.assert_allclose(value, expected_value, rtol=1e-5, atol=1e-5)
    assert len(gradients) == len(expected_gradients)  # x, the kernel (and the bias)
    for gradient, expected in zip(gradients, expected_gradients):
        np.testing.assert_allclose(gradient, expected, rtol=1e-5, atol=1e-4)


def test_a_model_with_it_saves_and_loads(tmp_path):
    assert_saves_and_loads(ShiftedConv2D(3, 3, padding="same", name="conv"), (6, 6, 1),
                           tmp_path)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function and XLA")
@pytest.mark.parametrize("jit_compile", [False, True])
def test_graph_and_xla_gradients_match_eager(jit_compile):
    import tensorflow as tf

    layer = ShiftedConv2D(3, 3, padding="same")
    x = tf.constant(np.random.default_rng(4).normal(size=(2, 6, 5, 1)).astype("float32"))
    layer.build(x.shape)

    def gradients(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            objective = tf.reduce_sum(tf.sin(layer(x)))
        return tape.gradient(objective, [x, layer.kernel.value, layer.bias.value])

    eager = gradients(x)
    compiled = tf.function(gradients, jit_compile=jit_compile)(x)
    for a, b in zip(compiled, eager):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def test_mixed_precision_returns_float16(mixed_precision):
    x = np.random.default_rng(5).normal(size=(2, 6, 6, 1)).astype("float16")
    theirs, ours = _pair({"filters": 2, "kernel_size": 3, "padding": "same"}, x.shape)
    y = ours(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float16"
    np.testing.assert_allclose(numpy(y).astype("float32"),
                               numpy(theirs(x)).astype("float32"), atol=1e-2)
