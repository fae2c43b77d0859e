"""Checks shared by the loss tests: modes, exact weights, serialization, save/load, precision.

Every loss is run eager, in tf.function and with jit_compile, its weights are
compared with autodiff, it round-trips through its config and a `.keras` file,
and it gives float32 results under the mixed_float16 policy.
"""

import os

import keras
import numpy as np
import tensorflow as tf

from keras_dml import losses, weighting
from keras_dml.testing.contract import DEGENERATE_BATCHES  # name: labels


def batch(classes=4, k=3, dim=8, seed=0, scale=1.0):
    """C x k labels (int32) and Gaussian embeddings (float32)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), k).astype("int32")
    embeddings = (scale * rng.normal(size=(classes * k, dim))).astype("float32")
    return labels, embeddings


def value_and_gradient(loss, labels, embeddings, mode="eager"):
    """Loss value and d loss / d embeddings, eager, in tf.function or jit-compiled."""
    x = tf.constant(embeddings)
    y = tf.constant(labels)

    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(y, x)
        return value, tf.convert_to_tensor(tape.gradient(value, x))

    if mode != "eager":
        step = tf.function(step, jit_compile=mode == "jit")
    value, gradient = step(x, y)
    return float(value), np.asarray(gradient)


def traced_tensor_shapes(loss, labels, embeddings):
    """Static shapes of every tensor in the traced forward + backward graph of `loss`."""

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(labels, x)
        return tape.gradient(value, x)

    graph = step.get_concrete_function(tf.TensorSpec(embeddings.shape, tf.float32)).graph
    return [out.shape for op in graph.get_operations() for out in op.outputs]


def assert_modes_agree(loss, labels, embeddings, rtol=1e-5, atol=1e-6):
    """Eager, tf.function and XLA give the same value and gradient; returns eager ones."""
    value, gradient = value_and_gradient(loss, labels, embeddings, "eager")
    for mode in ("function", "jit"):
        other_value, other_gradient = value_and_gradient(loss, labels, embeddings, mode)
        np.testing.assert_allclose(other_value, value, rtol=rtol, atol=atol, err_msg=mode)
        np.testing.assert_allclose(other_gradient, gradient, rtol=1e-4, atol=1e-5, err_msg=mode)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
    return value, gradient


def assert_exact_weights(loss, labels, embeddings, rtol=1e-5, atol=1e-6):
    """The engine's W equals plain autodiff of the value w.r.t. the matrix."""
    autodiff, weights = weighting.autodiff_weights(loss, labels, embeddings)
    np.testing.assert_allclose(weights, autodiff, rtol=rtol, atol=atol)
    return weights


def assert_config_round_trip(loss):
    """get_config / from_config and keras serialization rebuild an equal config."""
    config = loss.get_config()
    clone = type(loss).from_config(config)
    assert clone.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == config
    by_name = losses.get(f"keras_dml>{type(loss).__name__}")
    assert type(by_name) is type(loss)
    return clone


def small_model(dim=8, inputs=6, seed=0):
    from keras_dml.models import DMLModel

    keras.utils.set_random_seed(seed)
    x = keras.Input((inputs,))
    y = keras.layers.Dense(dim, name="embedding")(x)
    return DMLModel(x, y)


def assert_save_load(loss, tmp_path, classes=4, k=3, dim=8, inputs=6, same_loss=True):
    """A DMLModel compiled with `loss` trains, saves to .keras and loads back equal.

    `same_loss=False` skips comparing evaluated losses (for randomised miners).
    """
    model = small_model(dim, inputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(classes * k, inputs)).astype("float32")
    y = np.repeat(np.arange(classes), k).astype("int32")
    model.fit(x, y, batch_size=classes * k, epochs=2, verbose=0, shuffle=False)
    path = os.path.join(str(tmp_path), "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0),
                               rtol=1e-6, atol=1e-6)
    assert type(loaded.dml_loss) is type(loss)
    assert loaded.dml_loss.get_config() == model.dml_loss.get_config()
    if same_loss:
        np.testing.assert_allclose(loaded.evaluate(x, y, batch_size=classes * k, verbose=0),
                                   model.evaluate(x, y, batch_size=classes * k, verbose=0),
                                   rtol=1e-5, atol=1e-6)
    return model, loaded


def assert_classifier_trains_and_reloads(loss, classes, tmp_path, epochs=15, dim=8):
    """A DMLModel with the classifier (proxy) loss `loss` learns well-separated Gaussian
    classes: `loss.logits` classifies > 90% of them (from below 90% untrained), and the
    `.keras` file loads back with the same proxies, config and logits."""
    rng = np.random.default_rng(0)
    centers = rng.normal(size=(classes, 6))
    y = np.repeat(np.arange(classes), 12)
    x = (centers[y] + 0.3 * rng.normal(size=(len(y), 6))).astype("float32")
    model = small_model(dim=dim, inputs=6)
    model.compile(keras.optimizers.Adam(1e-2), loss=loss)
    before = np.mean(np.argmax(loss.logits(model(x)), axis=1) == y)
    model.fit(x, y, batch_size=20, epochs=epochs, verbose=0)
    accuracy = np.mean(np.argmax(loss.logits(model(x)), axis=1) == y)
    assert accuracy > 0.9 > before, (before, accuracy)
    path = os.path.join(str(tmp_path), "classifier.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.dml_loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.dml_loss.proxies.numpy(), loss.proxies.numpy())
    np.testing.assert_allclose(loaded.dml_loss.logits(loaded(x)), loss.logits(model(x)),
                               rtol=1e-5, atol=1e-5)


def assert_mixed_precision(make_loss, labels, embeddings, rtol=1e-3):
    """Under mixed_float16 the loss is float32, equal to the float32 loss of the
    float16-rounded inputs (it computes in float32), and within `rtol` of the float32
    loss of the unrounded inputs (float16 rounds each input by up to 4.9e-4 relative;
    the losses here measured at most 1.3e-4)."""
    reference = float(make_loss()(labels, embeddings))
    previous = keras.mixed_precision.global_policy()
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        loss = make_loss()
        half = tf.cast(embeddings, tf.float16)
        value = loss(labels, half)
        assert value.dtype == tf.float32
        expected = float(make_loss()(labels, tf.cast(half, tf.float32)))
    finally:
        keras.mixed_precision.set_global_policy(previous)
    np.testing.assert_allclose(float(value), expected, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(float(value), reference, rtol=rtol, atol=1e-6)




def assert_degenerate_finite(loss, dim=8, expect_zero=(), modes=("eager", "jit")):
    """Degenerate batches give a finite value and gradient, eager and under XLA."""
    rng = np.random.default_rng(3)
    for name, labels in DEGENERATE_BATCHES.items():
        embeddings = rng.normal(size=(len(labels), dim)).astype("float32")
        for mode in modes:
            value, gradient = value_and_gradient(loss, labels.astype("int32"), embeddings, mode)
            assert np.isfinite(value), (name, mode)
            assert np.all(np.isfinite(gradient)), (name, mode)
            if name in expect_zero:
                assert value == 0.0 and not np.any(gradient), (name, mode, value)
