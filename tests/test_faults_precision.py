"""Faults: NaN batches and mixed precision, for every registered loss."""

import numpy as np
import pytest
import tensorflow as tf

import keras
from keras_dml import losses
from keras_dml.models import StopOnNonFinite, DMLModel
from keras_dml.training import make_loss

pytestmark = pytest.mark.faults

POLICIES = ["mixed_float16", "mixed_bfloat16"]


def _data(n=16):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6)).astype("float32"), np.repeat(np.arange(4), n // 4)


def _model(loss):
    inputs = keras.Input((6,))
    hidden = keras.layers.Dense(8, activation="relu")(inputs)
    model = DMLModel(inputs, keras.layers.Dense(4, dtype="float32")(hidden))
    model.compile(keras.optimizers.Adam(1e-3), loss)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_a_nan_image_stops_mixed_precision_training_with_a_clear_error(policy):
    keras.mixed_precision.set_global_policy(policy)
    x, y = _data()
    x[3] = np.nan
    model = _model(losses.MultiSimilarity())
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FloatingPointError, match="NaN or Inf in the embeddings"):
        model.fit(x, y, batch_size=16, epochs=3, verbose=0)
    assert all((a == b).all() for a, b in zip(before, model.get_weights()))


def test_nan_batches_in_float32_stop_before_any_update():
    x, y = _data()
    x[0, 0] = np.inf
    model = _model(losses.ProxyAnchor(num_classes=4))
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FloatingPointError):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    assert all((a == b).all() for a, b in zip(before, model.get_weights()))


def test_a_collapsed_loss_scale_is_a_clear_error():
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = _data()
    model = _model(losses.MultiSimilarity())
    model.optimizer.build(model.trainable_variables)
    model.optimizer.dynamic_scale.assign(2.0**-20)  # as after a stream of skipped steps
    with pytest.raises(FloatingPointError, match="loss scale fell to"):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[StopOnNonFinite()])


def _registered():
    return sorted(losses.LOSSES)


def _loss_and_labels(name, n=16):
    loss = make_loss(name, num_classes=4)
    if getattr(loss, "continuous_labels", False):
        return loss, np.random.default_rng(1).random((n, 1)).astype("float32")
    return loss, np.repeat(np.arange(4), n // 4)


@pytest.mark.slow
@pytest.mark.parametrize("policy", POLICIES)
def test_every_registered_loss_is_finite_under_mixed_precision(policy):
    keras.mixed_precision.set_global_policy(policy)
    layer = keras.layers.Dense(8)
    x = tf.constant(np.random.default_rng(0).normal(size=(16, 6)).astype("float32"))
    bad = []
    for name in _registered():
        loss, labels = _loss_and_labels(name)
        with tf.GradientTape() as tape:
            embeddings = layer(x)  # float16 / bfloat16 under the policy
            value = loss(labels, embeddings)
        gradients = tape.gradient(value, layer.trainable_weights)
        if value.dtype != tf.float32 or not all(
                bool(tf.reduce_all(tf.math.is_finite(g))) for g in [value] + gradients):
            bad.append(name)
    assert embeddings.dtype != tf.float32
    assert not bad, f"non-finite or not float32 under {policy}: {bad}"


@pytest.mark.slow
def test_every_registered_loss_is_finite_or_a_clear_error_at_1e30():
    embeddings = tf.constant(np.random.default_rng(0).normal(size=(16, 8)).astype("float32")
                             * 1e30)
    bad = []
    for name in _registered():
        loss, labels = _loss_and_labels(name)
        try:
            with tf.GradientTape() as tape:
                tape.watch(embeddings)
                value = loss(labels, embeddings)
            gradient = tape.gradient(value, embeddings)
        except ValueError as error:
            assert "overflow" in str(error), (name, error)
            continue
        if not (np.isfinite(float(value)) and bool(tf.reduce_all(tf.math.is_finite(gradient)))):
            bad.append(name)
    assert not bad, f"non-finite loss or gradient at 1e30 without an error: {bad}"
