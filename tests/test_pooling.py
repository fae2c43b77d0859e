"""`keras_dml.layers.pooling.TiledMaxPooling2D` on the running Keras backend (its tiled path on
JAX, in training): Keras' `MaxPooling2D` values and gradients. NumPy inputs, no
TensorFlow."""

import keras
import numpy as np
import pytest

from keras_dml.backend.gradients import value_and_gradient
from keras_dml.layers.pooling import TiledMaxPooling2D
from layer_checks import assert_saves_and_loads, numpy, relu_then_pool

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def _value_and_gradient(layer, x):
    weights = keras.ops.convert_to_tensor(
        np.random.default_rng(1).normal(size=layer.compute_output_shape(x.shape)), "float32")
    value, _, gradient = value_and_gradient(lambda t: (layer(t, training=True) * weights, None),
                                            keras.ops.convert_to_tensor(x))
    return numpy(value), numpy(gradient)


@pytest.mark.parametrize("options", [
    {},  # the tiled path on JAX
    {"pool_size": 3},
    {"pool_size": (2, 3)},
    {"strides": 1},  # overlapping windows: Keras' path everywhere
    {"padding": "same"},
])
def test_values_and_gradients_are_keras_max_pooling(options):
    x = np.random.default_rng(0).normal(size=(3, 7, 9, 4)).astype("float32")  # no ties
    value, gradient = _value_and_gradient(TiledMaxPooling2D(**options), x)
    expected_value, expected_gradient = _value_and_gradient(
        keras.layers.MaxPooling2D(**options), x)
    assert value.shape == expected_value.shape
    np.testing.assert_allclose(value, expected_value, rtol=0, atol=0)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("training", [True, False, None])
def test_the_tiles_serve_training_and_keras_pooling_inference(training, monkeypatch):
    # On JAX the tiles' gradient is the fast one; XLA:CPU's own pooling has the faster
    # forward pass, so inference takes it. The values are Keras' either way.
    x = np.random.default_rng(5).normal(size=(2, 6, 8, 3)).astype("float32")
    calls = []
    if keras.backend.backend() == "jax":
        from keras_dml.backend.jax import layers as jax_layers

        tiles = jax_layers.max_over_tiles
        monkeypatch.setattr(jax_layers, "max_over_tiles",
                            lambda *args: calls.append(args) or tiles(*args))
    value = numpy(TiledMaxPooling2D()(keras.ops.convert_to_tensor(x), training=training))
    np.testing.assert_array_equal(value, numpy(keras.layers.MaxPooling2D()(x)))
    assert len(calls) == (keras.backend.backend() == "jax" and training is True)


def test_a_model_with_it_saves_and_loads(tmp_path):
    assert_saves_and_loads(TiledMaxPooling2D(name="pool"), (6, 6, 2), tmp_path)


def test_ties_send_the_gradient_to_the_first_maximum_as_keras_does():
    # ReLU outputs: tiles of zeros and tiles with a repeated positive maximum.
    x = np.maximum(np.random.default_rng(3).integers(-2, 3, size=(4, 6, 8, 3)), 0)
    value, gradient = _value_and_gradient(TiledMaxPooling2D(), x.astype("float32"))
    expected_value, expected_gradient = _value_and_gradient(
        keras.layers.MaxPooling2D(), x.astype("float32"))
    np.testing.assert_array_equal(value, expected_value)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-6)
    assert np.count_nonzero(gradient) == np.count_nonzero(expected_gradient)


@pytest.mark.parametrize("options", [{"pool_size": 3, "strides": 2}, {"pool_size": (2, 3)}])
def test_overlapping_and_uneven_windows_are_keras_max_pooling(options):
    # PyTorch's channels-last view takes any "valid" window; the other backends, Keras'.
    x = np.random.default_rng(4).normal(size=(2, 9, 8, 3)).astype("float32")
    value, gradient = _value_and_gradient(TiledMaxPooling2D(**options), x)
    expected_value, expected_gradient = _value_and_gradient(
        keras.layers.MaxPooling2D(**options), x)
    np.testing.assert_array_equal(value, expected_value)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name, shape", [("cnn3", (28, 28, 1)), ("convnet", (16, 16, 3))])
def test_the_networks_pool_before_relu_the_same_function(name, shape):
    """Pooling before ReLU: the same function as ReLU before pooling (values and gradients
    to the input) on this backend."""
    from keras_dml import backbones

    keras.utils.set_random_seed(0)
    model = backbones.get(name, shape)
    kinds = [type(layer).__name__ for layer in model.layers]
    first = kinds.index("TiledMaxPooling2D")
    assert kinds[first + 1] == "ReLU"
    layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
    for layer in layers:  # moving statistics: no update inside the traced gradient (JAX)
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.trainable = False

    x = np.random.default_rng(2).normal(size=(4,) + shape).astype("float32")
    weights = keras.ops.convert_to_tensor(
        np.random.default_rng(3).normal(size=model.output.shape[1:]), "float32")
    ours = value_and_gradient(lambda t: (model(t, training=True) * weights, None),
                              keras.ops.convert_to_tensor(x))
    other = value_and_gradient(lambda t: (relu_then_pool(model, t, True) * weights, None),
                               keras.ops.convert_to_tensor(x))
    np.testing.assert_array_equal(numpy(ours[0]), numpy(other[0]))
    np.testing.assert_allclose(numpy(ours[2]), numpy(other[2]), rtol=1e-5, atol=1e-6)
