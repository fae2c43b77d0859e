"""Batches and checks shared by the test files of Contrastive (test_losses_contrastive),
Triplet (test_losses_triplet), the lifted structure losses (test_losses_lifted),
binomial deviance and BinLifted (test_losses_binomial) and MS/RAW
(test_losses_multi_similarity).

Each file lists its loss settings as (id, loss factory, NumPy reference loop) cases;
the checks below take one case: the value against the loop (tests/reference.py), the
execution modes, mixed precision, degenerate and easy batches, serialization and a
trained, saved and reloaded DMLModel.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.models import DMLModel

from loss_checks import assert_config_round_trip, value_and_gradient


def _batch(classes=4, per_class=3, dim=6, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class).astype("int32")
    rng.shuffle(labels)
    return labels, (scale * rng.normal(size=(classes * per_class, dim))).astype("float32")


def _uneven(seed=1):
    """Classes of sizes 4, 3, 2, 1 and 1 (singletons have no positive)."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4], "int32")
    return labels, rng.normal(size=(len(labels), 5)).astype("float32")


def _well_separated():
    """Three classes on orthogonal axes: positives coincide, negatives are orthogonal."""
    labels = np.array([0, 0, 1, 1, 2, 2], "int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0) * 3.0
    return labels, x


DEGENERATE = {
    "all_singletons": (np.arange(6, dtype="int32"), None),
    "one_class": (np.zeros(6, "int32"), None),
    "k1_two_samples": (np.array([0, 1], "int32"), None),
    "single_sample": (np.array([0], "int32"), None),
}


# -- values against the NumPy loops ---------------------------------------------------------

def assert_value_matches_numpy_reference(name, factory, reference, batch):
    labels, x = _batch(seed=2) if batch == "balanced" else _uneven(seed=3)
    if "euc" in name or name.startswith("lifted") and "cos" not in name:
        x = 0.6 * x  # distances of the order of the margins
    expected = reference(x.astype("float64"), labels)
    np.testing.assert_allclose(float(factory()(labels, x)), expected, rtol=2e-5, atol=2e-6)


# -- execution modes, precision, degenerate batches ----------------------------------------

def assert_eager_function_and_jit_agree(factory):
    labels, x = _uneven(seed=14)
    loss = factory()
    eager = value_and_gradient(loss, labels, x)
    for mode in ("function", "jit"):
        value, grad = value_and_gradient(loss, labels, x, mode)
        np.testing.assert_allclose(value, eager[0], rtol=1e-5)
        np.testing.assert_allclose(grad, eager[1], rtol=1e-4, atol=1e-6)


def assert_mixed_float16_policy_matches_float32(name, factory):
    labels, x = _batch(seed=15, dim=8)
    if "euc" in name or name == "lifted":
        x = 0.6 * x
    expected = float(factory()(labels, x))
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        loss = factory()
        value = loss(labels, tf.constant(x, tf.float16))
        assert value.dtype == tf.float32
        reference_half = float(factory()(labels, x.astype("float16").astype("float32")))
        np.testing.assert_allclose(float(value), reference_half, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(value), expected, rtol=1e-3, atol=1e-3)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def assert_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    labels, _ = DEGENERATE[batch]
    x = np.random.default_rng(16).normal(size=(len(labels), 4)).astype("float32")
    value, grad = value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    if not name.startswith(("bin", "contrastive", "ms_no")):  # these pull lone positives
        assert value == 0.0 and np.all(grad == 0.0)
    assert value == pytest.approx(reference(x.astype("float64"), labels), abs=1e-6)


def assert_all_pairs_easy_batch_is_finite(name, factory, reference):
    labels, x = _well_separated()
    value, grad = value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert value == pytest.approx(reference(x.astype("float64"), labels), rel=1e-4, abs=1e-5)
    if name.startswith(("triplet", "contrastive_cos", "ms", "raw")):
        assert np.all(np.abs(grad) < 1e-6)  # every constraint satisfied: nothing to learn


# -- serialization, models ------------------------------------------------------------------

def assert_config_round_trip_and_lookup_by_name(loss):
    assert_config_round_trip(loss)  # from_config, keras.saving, keras_dml.losses.get by name
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    registered = f"keras_dml>{type(loss).__name__}"
    assert keras.saving.get_registered_object(registered) is type(loss)
    labels, x = _batch(seed=17)
    assert float(restored(labels, x)) == pytest.approx(float(loss(labels, x)), rel=1e-6)


def assert_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    labels, x = _batch(classes=6, per_class=4, dim=10, seed=18)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    history = model.fit(x, labels, batch_size=24, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    after = model.evaluate(x, labels, batch_size=24, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.evaluate(x, labels, batch_size=24, verbose=0), after,
                               rtol=1e-5)
    string_model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    string_model.compile(optimizer="sgd", loss=f"keras_dml>{type(loss).__name__}")
    assert type(string_model.loss) is type(loss)
