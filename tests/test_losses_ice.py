"""Tests of keras_dml.losses.InstanceCrossEntropy against the paper's equations."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from keras_dml.losses import InstanceCrossEntropy
from keras_dml.models import DMLModel
from keras_dml.weighting import autodiff_weights, pair_weights

import reference as ref
from loss_checks import traced_tensor_shapes, value_and_gradient

SCALES = (1.0, 16.0, 64.0, 80.0)


def _batch(classes, k, dim=8, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), k).astype("int32")
    return labels, rng.normal(size=(len(labels), dim)).astype("float32")


def _uneven_batch(seed=1):
    """Classes of 4, 3, 2 and 1 samples: the singleton acts only as a negative."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 1, 0, 2, 1, 0, 3, 2, 1, 0], "int32")
    return labels, rng.normal(size=(len(labels), 6)).astype("float32")


def _separated_batch(classes=4, k=3, dim=16, spread=0.05, seed=2):
    """Tight classes on near-orthogonal axes: every positive far closer than every negative."""
    rng = np.random.default_rng(seed)
    centres = np.eye(dim)[:classes] - np.eye(dim)[classes:2 * classes]
    labels = np.repeat(np.arange(classes), k).astype("int32")
    x = centres[labels] + spread * rng.normal(size=(len(labels), dim))
    return labels, x.astype("float32")


def _embedding_gradient(labels, x, scale):
    """dL/dx by the chain rule from the reference dL/dS through S = U U^T, U = x / |x|."""
    x = np.asarray(x, np.float64)
    norm = np.linalg.norm(x, axis=1, keepdims=True)
    u = x / norm
    g = ref.ice_gradient(labels, u @ u.T, scale)
    du = (g + g.T) @ u
    return (du - u * np.sum(du * u, axis=1, keepdims=True)) / norm


# -- value and weights against the reference ------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("batch", [lambda: _batch(4, 3), lambda: _batch(3, 5, seed=3),
                                   _uneven_batch])
def test_value_and_weights_match_reference(scale, batch):
    labels, x = batch()
    loss = InstanceCrossEntropy(scale=scale)
    similarity = ref.cosine(x)
    np.testing.assert_allclose(float(loss(labels, x)), ref.ice_loss(labels, similarity, scale),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pair_weights(loss, labels, x),
                               ref.ice_weights(labels, similarity, scale), rtol=1e-4, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize("scale", (1.0, 32.0, 80.0))
def test_gradient_reaches_embeddings_by_chain_rule(scale):
    labels, x = _uneven_batch(seed=4)
    _, grad = value_and_gradient(InstanceCrossEntropy(scale=scale), labels, x)
    np.testing.assert_allclose(grad, _embedding_gradient(labels, x, scale), rtol=1e-4,
                               atol=1e-6)


@pytest.mark.parametrize("scale", (1.0, 16.0, 64.0))
def test_per_anchor_weight_sums_are_one_over_2n(scale):
    labels, x = _uneven_batch(seed=5)
    n = len(labels)
    w = pair_weights(InstanceCrossEntropy(scale=scale), labels, x)
    same = labels[:, None] == labels[None, :]
    has_positive = np.array([np.sum(labels == c) > 1 for c in labels])
    positive_sums = np.sum(np.where(same, w, 0.0), axis=1)
    negative_sums = np.sum(np.where(same, 0.0, w), axis=1)
    expected = np.where(has_positive, 1.0 / (2 * n), 0.0)
    np.testing.assert_allclose(positive_sums, expected, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(negative_sums, expected, rtol=1e-5, atol=1e-9)
    assert np.all(np.diag(w) == 0.0)
    singleton = np.flatnonzero(~has_positive)
    assert len(singleton) == 1 and np.all(w[singleton] == 0.0)
    # ...but the singleton is still a weighted negative of every other anchor.
    assert np.all(w[has_positive][:, singleton] > 0.0)


def test_two_per_class_is_eq_16_17():
    labels, x = _batch(6, 2, seed=6)
    for scale in (4.0, 64.0):
        w = pair_weights(InstanceCrossEntropy(scale=scale), labels, x)
        expected = ref.ice_weights_two_per_class(labels, ref.cosine(x), scale)
        np.testing.assert_allclose(w, expected, rtol=1e-4, atol=1e-8)
        positive = (labels[:, None] == labels[None, :]) & ~np.eye(len(labels), dtype=bool)
        np.testing.assert_allclose(w[positive], 1.0 / (2 * len(labels)), rtol=1e-6)


def test_weights_are_the_normalised_derivative_not_the_derivative():
    """Per side, W is the autodiff derivative rescaled to total 1/2 (eq. 13-14 vs 7-8)."""
    labels, x = _batch(4, 3, seed=7)
    loss = InstanceCrossEntropy(scale=16.0)
    autodiff, weights = autodiff_weights(loss, labels, x)
    same = labels[:, None] == labels[None, :]
    for side in (same, ~same):
        a = np.where(side, autodiff, 0.0)
        expected = 0.5 * a / np.sum(np.abs(a), axis=1, keepdims=True)
        np.testing.assert_allclose(np.where(side, weights, 0.0), expected, rtol=1e-4,
                                   atol=1e-7)
    assert not np.allclose(weights, autodiff, rtol=1e-2)


def test_scale_changes_relative_weights_not_totals():
    labels, x = _batch(4, 3, seed=8)
    low = pair_weights(InstanceCrossEntropy(scale=1.0), labels, x)
    high = pair_weights(InstanceCrossEntropy(scale=64.0), labels, x)
    np.testing.assert_allclose(low.sum(axis=1), high.sum(axis=1), rtol=1e-5)
    negative = labels[:, None] != labels[None, :]
    # Higher s concentrates each anchor's negative weight on its hardest negatives.
    assert np.all(np.max(np.where(negative, high, 0), 1) > np.max(np.where(negative, low, 0), 1))


# -- numerical stability ------------------------------------------------------------------

@pytest.mark.parametrize("scale", (64.0, 80.0))
def test_well_separated_batch_weights_stay_exact(scale):
    labels, x = _separated_batch()
    loss = InstanceCrossEntropy(scale=scale)
    similarity = ref.cosine(x)
    expected = ref.ice_weights(labels, similarity, scale)
    same = labels[:, None] == labels[None, :]
    assert np.min(similarity[same]) > 0.9 and np.max(np.abs(similarity[~same])) < 0.5
    # Here 1 - p^(i|a) is below float32's resolution next to 1: computed as one minus
    # a float32 probability it would be 0 for every positive, and eq. 13 would be 0/0.
    scaled = np.exp(scale * similarity)
    for a in range(len(labels)):
        for i in np.flatnonzero(same[a]):
            p = scaled[a, i] / (scaled[a, i] + scaled[a, ~same[a]].sum())
            assert np.float32(1.0) - np.float32(p) == 0.0
    w = pair_weights(loss, labels, x)
    np.testing.assert_allclose(w, expected, rtol=2e-4, atol=1e-9)
    value, grad = value_and_gradient(loss, labels, x)
    assert np.isfinite(value) and value >= 0.0 and np.all(np.isfinite(grad))
    np.testing.assert_allclose(value, ref.ice_loss(labels, similarity, scale), atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("scale", (80.0, 200.0, 1000.0))
def test_finite_at_large_scale_float32_and_mixed_precision(scale):
    labels, x = _batch(5, 4, dim=16, seed=9)
    loss = InstanceCrossEntropy(scale=scale)
    for dtype in ("float32", "float16"):
        value, grad = value_and_gradient(loss, labels, x.astype(dtype))
        assert np.isfinite(value) and np.all(np.isfinite(grad)), dtype


@pytest.mark.slow
def test_mixed_float16_policy_matches_float32():
    labels, x = _batch(5, 4, dim=16, seed=10)
    inputs = keras.Input((16,))
    expected_value, _ = value_and_gradient(InstanceCrossEntropy(64.0), labels, x)
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = keras.Sequential([inputs, keras.layers.Dense(16)])
        loss = InstanceCrossEntropy(64.0)
        half = model(x)
        assert half.dtype == "float16"
        value = loss(labels, half)
        assert value.dtype == tf.float32
        reference, _ = value_and_gradient(loss, labels, np.asarray(half, np.float32))
        np.testing.assert_allclose(float(value), reference, rtol=1e-3)
        value16, _ = value_and_gradient(loss, labels, x.astype("float16"))
        np.testing.assert_allclose(value16, expected_value, rtol=1e-3)
    finally:
        keras.mixed_precision.set_global_policy("float32")


# -- degenerate batches --------------------------------------------------------------------

@pytest.mark.parametrize("labels", [np.zeros(6, "int32"), np.arange(6, dtype="int32")],
                         ids=["one_class", "all_singletons"])
def test_degenerate_batches_give_zero_value_and_gradient(labels):
    x = np.random.default_rng(11).normal(size=(6, 4)).astype("float32")
    loss = InstanceCrossEntropy()
    value, grad = value_and_gradient(loss, labels, x)
    assert value == 0.0 and np.all(grad == 0.0)
    assert np.all(pair_weights(loss, labels, x) == 0.0)


# -- execution modes -----------------------------------------------------------------------

def test_eager_function_and_jit_agree():
    labels, x = _uneven_batch(seed=12)
    loss = InstanceCrossEntropy(scale=32.0)
    eager = value_and_gradient(loss, labels, x)
    for mode in ("function", "jit"):
        value, grad = value_and_gradient(loss, labels, x, mode)
        np.testing.assert_allclose(value, eager[0], rtol=1e-5)
        np.testing.assert_allclose(grad, eager[1], rtol=1e-4, atol=1e-7)


def test_memory_is_quadratic_no_rank_3_tensor():
    """The traced forward + backward graph holds no tensor of rank above 2."""
    labels, x = _batch(8, 4, dim=12)
    shapes = traced_tensor_shapes(InstanceCrossEntropy(), labels, x)
    ranks = [shape.rank for shape in shapes if shape.rank is not None]
    assert ranks and max(ranks) <= 2


# -- arguments and serialization -----------------------------------------------------------

@pytest.mark.parametrize("kwargs", [{"scale": 0.0}, {"scale": -1.0}, {"scale": float("nan")},
                                    {"scale": float("inf")}, {"scale": "big"},
                                    {"metric": "euclidean"}])
def test_bad_arguments_raise_value_error(kwargs):
    with pytest.raises(ValueError, match="scale|metric"):
        InstanceCrossEntropy(**kwargs)


def test_bad_inputs_raise_value_error():
    loss = InstanceCrossEntropy()
    with pytest.raises(ValueError, match="batch size"):
        loss(np.zeros(5, "int32"), np.ones((4, 3), "float32"))
    with pytest.raises(ValueError, match="NaN"):
        loss(np.zeros(2, "int32"), np.array([[np.nan, 1.0], [1.0, 0.0]], "float32"))


def test_dot_metric_equals_cosine_on_unit_vectors():
    labels, x = _batch(4, 3, seed=13)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    np.testing.assert_allclose(float(InstanceCrossEntropy(metric="dot")(labels, unit)),
                               float(InstanceCrossEntropy()(labels, x)), rtol=1e-5)


def test_config_round_trip_and_lookup_by_name():
    loss = InstanceCrossEntropy(scale=32.0, name="ice")
    config = loss.get_config()
    assert config["scale"] == 32.0 and config["metric"] == "cosine"
    clone = InstanceCrossEntropy.from_config(config)
    assert clone.get_config() == config
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert isinstance(restored, InstanceCrossEntropy) and restored.scale == 32.0
    by_name = keras_dml.losses.get("keras_dml>InstanceCrossEntropy")
    assert isinstance(by_name, InstanceCrossEntropy) and by_name.scale == 64.0
    labels, x = _batch(3, 3)
    assert float(clone(labels, x)) == pytest.approx(float(loss(labels, x)))


def test_model_compiled_with_loss_trains_and_survives_save_load(tmp_path):
    labels, x = _batch(6, 4, dim=10, seed=14)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras_dml.losses.InstanceCrossEntropy(scale=16.0))
    before = model.evaluate(x, labels, batch_size=24, verbose=0)
    model.fit(x, labels, batch_size=24, epochs=20, shuffle=False, verbose=0)
    after = model.evaluate(x, labels, batch_size=24, verbose=0)
    assert after < before
    path = str(tmp_path / "ice.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded.loss, InstanceCrossEntropy) and loaded.loss.scale == 16.0
    np.testing.assert_allclose(loaded.evaluate(x, labels, batch_size=24, verbose=0), after,
                               rtol=1e-5)

    string_model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    string_model.compile(optimizer="sgd", loss="keras_dml>InstanceCrossEntropy")
    assert np.isfinite(string_model.evaluate(x, labels, batch_size=24, verbose=0))


def test_miner_restricts_pairs_and_round_trips():
    from keras_dml.mining import MultiSimilarityMiner

    labels, x = _batch(4, 4, seed=15)
    miner = MultiSimilarityMiner(0.1)
    loss = InstanceCrossEntropy(scale=32.0, miner=miner)
    similarity = ref.cosine(x).astype("float32")
    same = labels[:, None] == labels[None, :]
    kept_pos, kept_neg = (np.asarray(m) for m in miner(
        tf.constant(similarity), tf.constant(same & ~np.eye(16, dtype=bool)),
        tf.constant(~same)))
    w = pair_weights(loss, labels, x)
    assert np.all(w[~(kept_pos | kept_neg)] == 0.0)
    active = kept_pos.any(axis=1) & kept_neg.any(axis=1)
    np.testing.assert_allclose(np.sum(np.where(kept_pos, w, 0), axis=1),
                               np.where(active, 1 / 32, 0.0), rtol=1e-5, atol=1e-9)
    clone = InstanceCrossEntropy.from_config(loss.get_config())
    np.testing.assert_allclose(pair_weights(clone, labels, x), w, rtol=1e-6)
