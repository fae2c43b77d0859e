"""keras_dml.backend.torch.inference: a chain model's inference pass on PyTorch with its
convolutions and batch norms folded and ReLU after max pooling equals Keras' pass."""

import keras
import numpy as np
import pytest

from keras_dml.training.config import TrainConfig
from keras_dml.training.model import build_model

pytestmark = [pytest.mark.backend_neutral,
              pytest.mark.skipif(keras.backend.backend() != "torch",
                                 reason="the PyTorch backend's inference pass")]


def _randomise_statistics(model, seed=0):
    """Batch norms with moving statistics, scales and shifts far from their start, so a
    wrong fold shows."""
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            channels = layer.moving_mean.shape[0]
            layer.moving_mean.assign(rng.normal(size=channels).astype("float32"))
            layer.moving_variance.assign(rng.uniform(0.2, 3.0, channels).astype("float32"))
            if layer.scale:
                layer.gamma.assign(rng.uniform(0.5, 2.0, channels).astype("float32"))
            if layer.center:
                layer.beta.assign(rng.normal(size=channels).astype("float32"))
    return model


def _keras_pass(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def _fused_pass(model, x):
    from keras_dml.inference import inference_function

    return keras.ops.convert_to_numpy(inference_function(model)(x))


def _kinds(model):
    from keras_dml.backend.torch.inference import fused_inference

    fused = fused_inference(model)
    return None if fused is None else [kind for kind, _ in fused.steps]


@pytest.mark.parametrize("dataset, shape", [("folder", (64, 64, 3)), ("omniglot", (28, 28, 1))])
def test_the_trained_network_runs_fused_with_the_same_embeddings(dataset, shape):
    keras.utils.set_random_seed(0)
    model = _randomise_statistics(build_model(TrainConfig(dataset=dataset), shape).embedder())
    assert _kinds(model) == ["conv", "pool_relu"] * 3 + ["layer", "layer"]
    x = np.random.default_rng(1).uniform(0, 1, (16,) + shape).astype("float32")
    np.testing.assert_allclose(_fused_pass(model, x), _keras_pass(model, x), atol=1e-5)


def _keras_chain():
    inputs = keras.Input((20, 20, 3))
    x = keras.layers.Conv2D(8, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.BatchNormalization(center=False, scale=False)(x)
    x = keras.layers.Activation("relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(8, 3, strides=2)(x)  # "valid" at stride 2: PyTorch's own
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.ReLU(max_value=6.0)(x)  # not a plain ReLU: not moved
    x = keras.layers.MaxPooling2D(padding="same")(x)
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same")(x)  # Keras' padding: its own
    x = keras.layers.Conv2D(8, 1, activation="relu")(x)  # an activation inside: its own
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(4)(x))


def test_keras_layers_are_folded_where_the_values_allow():
    keras.utils.set_random_seed(0)
    model = _randomise_statistics(_keras_chain())
    assert _kinds(model) == ["conv", "pool_relu", "conv", "layer", "layer", "layer", "layer",
                             "layer", "layer"]
    x = np.random.default_rng(2).normal(size=(6, 20, 20, 3)).astype("float32")
    np.testing.assert_allclose(_fused_pass(model, x), _keras_pass(model, x), rtol=1e-5,
                               atol=1e-5)


def test_the_weights_are_read_at_each_call():
    from keras_dml.inference import inference_function

    keras.utils.set_random_seed(0)
    model = _randomise_statistics(_keras_chain())
    forward = inference_function(model)
    x = np.random.default_rng(3).normal(size=(4, 20, 20, 3)).astype("float32")
    before = keras.ops.convert_to_numpy(forward(x))
    _randomise_statistics(model, seed=9)
    after = keras.ops.convert_to_numpy(forward(x))
    assert not np.allclose(before, after)
    np.testing.assert_allclose(after, _keras_pass(model, x), rtol=1e-5, atol=1e-5)


def test_a_model_that_is_not_a_chain_takes_keras_pass():
    inputs = keras.Input((12, 12, 3))
    x = keras.layers.Conv2D(3, 3, padding="same")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Add()([x, inputs])  # a residual: not a chain
    model = keras.Model(inputs, keras.layers.GlobalMaxPooling2D()(x))
    assert _kinds(model) is None
    x = np.random.default_rng(4).normal(size=(3, 12, 12, 3)).astype("float32")
    np.testing.assert_allclose(_fused_pass(model, x), _keras_pass(model, x), rtol=1e-6)


def test_a_chain_with_nothing_to_fold_takes_keras_pass():
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3), keras.layers.ReLU()])
    assert _kinds(model) is None


def test_a_convolution_with_lora_takes_keras_pass():
    keras.utils.set_random_seed(0)
    model = _randomise_statistics(_keras_chain())
    model.layers[1].enable_lora(2)
    assert _kinds(model)[0] == "layer"
    x = np.random.default_rng(5).normal(size=(2, 20, 20, 3)).astype("float32")
    np.testing.assert_allclose(_fused_pass(model, x), _keras_pass(model, x), rtol=1e-5,
                               atol=1e-5)


def test_mixed_precision_layers_take_keras_pass(mixed_precision):
    model = _keras_chain()
    assert "conv" not in (_kinds(model) or [])
