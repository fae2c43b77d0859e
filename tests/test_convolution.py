"""`keras_dml.convolution.ShiftedConv2D` on the running Keras backend (its shifted path
on JAX and TensorFlow): Keras' `Conv2D` values and gradients. NumPy inputs."""

import keras
import numpy as np
import pytest

from keras_dml.backend.gradients import value_and_gradient
from keras_dml.convolution import ShiftedConv2D


def _numpy(value):
    return keras.ops.convert_to_numpy(value)


def _pair(options, input_shape):
    """Keras' layer and ours with the same weights."""
    layers = [keras.layers.Conv2D(**options), ShiftedConv2D(**options)]
    rng = np.random.default_rng(1)
    for layer in layers:
        layer.build(input_shape)
    weights = [rng.normal(size=w.shape).astype("float32") for w in layers[0].weights]
    for layer in layers:
        layer.set_weights(weights)
    return layers


def _value_and_gradients(layer, x):
    """(output, gradient for x, gradient for the kernel) of sum(output * fixed weights)."""
    upstream = keras.ops.convert_to_tensor(np.random.default_rng(2).normal(
        size=layer.compute_output_shape(x.shape)), "float32")
    weights = [_numpy(w) for w in layer.trainable_weights]
    packed = np.concatenate([x.ravel(), weights[0].ravel()])

    def objective(flat):
        inputs = keras.ops.reshape(flat[:x.size], x.shape)
        kernel = keras.ops.reshape(flat[x.size:], weights[0].shape)
        y, _ = layer.stateless_call([kernel] + [keras.ops.convert_to_tensor(w)
                                                for w in weights[1:]], [], inputs)
        return y * upstream, y

    _, y, gradient = value_and_gradient(objective, keras.ops.convert_to_tensor(packed))
    gradient = _numpy(gradient)
    return _numpy(y), gradient[:x.size], gradient[x.size:]


@pytest.mark.parametrize("options, channels", [
    ({"filters": 4, "kernel_size": 3, "padding": "same"}, 1),  # the shifted path on JAX
    ({"filters": 3, "kernel_size": (2, 3), "padding": "same"}, 1),  # an odd pixel to pad
    ({"filters": 2, "kernel_size": 3, "padding": "valid", "use_bias": False}, 1),
    ({"filters": 2, "kernel_size": 3, "padding": "same", "activation": "relu"}, 1),
    ({"filters": 2, "kernel_size": 3, "padding": "same"}, 3),  # Keras' path: 3 channels
    ({"filters": 2, "kernel_size": 3, "strides": 2}, 1),  # Keras' path: stride 2
])
def test_values_and_gradients_are_keras_conv2d(options, channels):
    x = np.random.default_rng(0).normal(size=(3, 7, 8, channels)).astype("float32")
    ours, theirs = _pair(options, x.shape)[::-1]
    shifted = keras.backend.backend() != "torch" and channels == 1 and "strides" not in options
    assert ours._shifted(keras.ops.convert_to_tensor(x)) == shifted
    value, x_gradient, kernel_gradient = _value_and_gradients(ours, x)
    expected = _value_and_gradients(theirs, x)
    assert value.shape == expected[0].shape
    np.testing.assert_allclose(value, expected[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(x_gradient, expected[1], rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(kernel_gradient, expected[2], rtol=1e-5, atol=1e-4)


def test_a_model_with_it_saves_and_loads(tmp_path):
    inputs = keras.Input((6, 6, 1))
    model = keras.Model(inputs, ShiftedConv2D(3, 3, padding="same", name="conv")(inputs))
    path = str(tmp_path / "conv.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded.get_layer("conv"), ShiftedConv2D)
    x = np.random.default_rng(3).normal(size=(2, 6, 6, 1)).astype("float32")
    np.testing.assert_array_equal(_numpy(loaded(x)), _numpy(model(x)))


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
    np.testing.assert_allclose(_numpy(y).astype("float32"),
                               _numpy(theirs(x)).astype("float32"), atol=1e-2)
