"""Margin loss (weighted contrastive eq. 3, Wu et al.)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml import weighting
from keras_dml.losses import Margin
from keras_dml.mining import DistanceWeighted


def _kept_pairs(positive, negative):
    kept = np.asarray(positive) | np.asarray(negative)
    return [tuple(p) for p in np.argwhere(kept)]


@pytest.mark.slow
@pytest.mark.parametrize("kwargs", [
    {},
    {"alpha": 0.3, "beta": 1.0},
    {"nu": 0.1},
    {"average": "active"},
    {"alpha": 0.1, "beta": 0.8, "nu": 0.05, "average": "active"},
])
def test_margin_matches_eq3_and_autodiff(kwargs):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=1)
    loss = Margin(**kwargs)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    expected = ref.margin(labels, x, kwargs.get("alpha", 0.2), kwargs.get("beta", 1.2),
                          kwargs.get("nu", 0.0), average=kwargs.get("average", "pairs"))
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_margin_per_class_beta_value_and_gradient():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=2)
    loss = Margin(num_classes=5, nu=0.1)
    loss.trainable_layer.build((None, 5))
    betas = np.array([1.0, 1.3, 1.1, 1.2, 0.9])
    loss.trainable_layer.beta.assign(betas)
    with tf.GradientTape() as tape:
        value = loss(labels, x)
    gradient = tf.convert_to_tensor(tape.gradient(value, loss.trainable_layer.beta)).numpy()
    np.testing.assert_allclose(float(value), ref.margin(labels, x, beta=betas, nu=0.1),
                               rtol=1e-5)
    # finite differences of the float64 reference, class by class
    for c in range(5):
        step = np.zeros(5)
        step[c] = 1e-5
        numeric = (ref.margin(labels, x, beta=betas + step, nu=0.1)
                   - ref.margin(labels, x, beta=betas - step, nu=0.1)) / 2e-5
        np.testing.assert_allclose(gradient[c], numeric, rtol=1e-3, atol=1e-6)
    assert gradient[3] == 0 and gradient[4] == 0  # classes absent from the batch
    checks.assert_exact_weights(loss, labels, x)


def test_margin_global_beta_gradient_and_fixed_beta():
    labels, x = checks.batch(classes=4, k=2, dim=4, seed=3)
    loss = Margin(nu=0.02)
    with tf.GradientTape() as tape:
        value = loss(labels, x)
    (gradient,) = tape.gradient(value, loss.trainable_layer.trainable_weights)
    numeric = (ref.margin(labels, x, beta=1.2 + 1e-5, nu=0.02)
               - ref.margin(labels, x, beta=1.2 - 1e-5, nu=0.02)) / 2e-5
    np.testing.assert_allclose(gradient.numpy()[0], numeric, rtol=1e-3, atol=1e-6)
    fixed = Margin(learn_beta=False)
    assert fixed.trainable_layer is None
    np.testing.assert_allclose(float(fixed(labels, x)), ref.margin(labels, x), rtol=1e-5)


def test_margin_pair_weights_are_inverse_distances_on_active_pairs():
    labels, x = checks.batch(classes=3, k=3, dim=4, seed=4)
    w = weighting.pair_weights(Margin(), labels, x)
    s = ref.similarity(x, "cosine")
    d = np.sqrt(np.maximum(2 - 2 * s, 0))
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(labels), dtype=bool)
    active = np.where(same, d - 1.2 + 0.2 > 0, 0.2 + 1.2 - d > 0) & off
    count = off.sum()
    expected = np.where(active, 1.0 / np.where(active, d, 1.0), 0.0) / count
    np.testing.assert_allclose(w, expected, rtol=1e-4, atol=1e-7)


@pytest.mark.slow
def test_margin_with_distance_weighted_miner_uses_the_kept_pairs():
    labels, x = checks.batch(classes=4, k=3, dim=16, seed=5)
    loss = Margin(miner=DistanceWeighted(seed=3))
    terms = loss.terms(labels, x)
    assert loss.miner._bound_dim == 16
    pairs = _kept_pairs(terms.positive, terms.negative)
    np.testing.assert_allclose(float(tf.reduce_mean(terms.value)),
                               ref.margin(labels, x, pairs=pairs), rtol=1e-5)
    for mode in ("eager", "function", "jit"):
        value, gradient = checks.value_and_gradient(loss, labels, x, mode)
        assert np.isfinite(value) and np.all(np.isfinite(gradient))


@pytest.mark.slow
def test_margin_degenerate_and_easy_batches():
    checks.assert_degenerate_finite(Margin(miner=DistanceWeighted(seed=0)),
                                    expect_zero=("single_sample",))
    # all pairs easy: positives within beta - alpha, negatives beyond beta + alpha
    labels = np.repeat(np.arange(3), 2).astype("int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0)
    value, gradient = checks.value_and_gradient(Margin(), labels, x, "jit")
    assert value == 0.0 and not np.any(gradient)


def test_margin_per_class_label_range_is_checked():
    with pytest.raises(ValueError, match="num_classes=3"):
        Margin(num_classes=3)(np.array([0, 3, 3, 0]), np.eye(4, dtype="float32"))


def test_margin_serialization_and_mixed_precision():
    loss = Margin(alpha=0.1, beta=1.0, num_classes=7, nu=0.01, average="active",
                  miner=DistanceWeighted(cutoff=0.4, seed=2))
    clone = checks.assert_config_round_trip(loss)
    assert clone.num_classes == 7 and clone.miner.seed == 2 and clone.trainable_layer
    layer = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(loss.trainable_layer))
    assert layer.num_classes == 7 and layer.initial_value == 1.0
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=6)
    checks.assert_mixed_precision(lambda: Margin(), labels, x)


def test_margin_beta_is_trained_and_saved_by_dml_model(tmp_path):
    loss = Margin(num_classes=4, miner=DistanceWeighted(seed=0))
    model, loaded = checks.assert_save_load(loss, tmp_path, dim=8, same_loss=False)
    names = [w.path for w in model.trainable_weights]
    assert any("beta" in name for name in names), names
    trained = np.asarray(model.dml_loss.trainable_layer.beta)
    assert trained.shape == (4,) and not np.allclose(trained, 1.2)
    assert any(w is model.dml_loss.trainable_layer.beta for w in model.trainable_weights)
    restored = np.asarray(loaded.dml_loss.trainable_layer.beta)
    np.testing.assert_allclose(restored, trained)
    assert any(w is loaded.dml_loss.trainable_layer.beta for w in loaded.trainable_weights)
    assert loaded.dml_loss.miner.get_config() == loss.miner.get_config()
    # without the random miner, the loaded model's loss is the trained one
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=8)
    for restored_loss, trained_loss in ((loaded.dml_loss, model.dml_loss),):
        restored_loss.miner = trained_loss.miner = None
        np.testing.assert_allclose(float(restored_loss(labels, x)), float(trained_loss(labels, x)),
                                   rtol=1e-6)


@pytest.mark.parametrize("kwargs", [{"alpha": -0.1}, {"beta": 0.0}, {"nu": -1},
                                    {"average": "mean"}, {"num_classes": 0}])
def test_margin_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Margin(**kwargs)
