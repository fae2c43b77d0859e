"""MultipleNegativesRanking (keras_dml/losses/multiple_negatives.py): the NumPy loop
with exact weights, the two-tower DMLModel and the hyperparameters (its eager /
tf.function / XLA, precision and serialization checks: tests/test_losses_cases.py;
its degenerate batches: the contract test, tests/test_losses_contract.py)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import MultipleNegativesRanking
from keras_dml.losses.base import PairLoss


def pairs_batch(n=8, dim=5, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(n, dim))
    documents = queries + scale * rng.normal(size=(n, dim))
    return np.concatenate([queries, documents], axis=1).astype("float32")


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("labels", [np.arange(8), np.array([0, 1, 2, 2, 3, 4, 5, 1])])
def test_multiple_negatives_ranking_matches_loop(symmetric, labels):
    labels = labels.astype("int32")
    pairs = pairs_batch()
    for scale in (20.0, 5.0):
        loss = MultipleNegativesRanking(scale=scale, symmetric=symmetric)
        value = float(loss(labels, pairs))
        np.testing.assert_allclose(
            value, ref.multiple_negatives_ranking(pairs, labels, scale, symmetric), rtol=1e-5)
        checks.assert_exact_weights(loss, labels, pairs, atol=1e-5)


@pytest.mark.parametrize("labels", [np.arange(8), np.array([0, 1, 2, 2, 3, 4, 5, 1]),
                                    np.zeros(8)], ids=["distinct", "duplicates", "one-label"])
def test_one_softmax_path_equals_the_engine(labels):
    """The default pairs take `one_softmax_values`; its values and gradient are the
    engine's (PairLoss.against), per row and through an uneven upstream gradient."""
    labels = tf.constant(labels.astype("int32"))
    pairs = tf.constant(pairs_batch(seed=3))
    loss = MultipleNegativesRanking(scale=20.0)
    upstream = tf.range(1.0, 9.0)

    def values_and_gradient(against):
        with tf.GradientTape() as tape:
            tape.watch(pairs)
            values = against(loss, labels, pairs, loss.default_reference(labels, pairs))
            total = tf.reduce_sum(values * upstream)
        return values.numpy(), tape.gradient(total, pairs).numpy()

    fast_values, fast_gradient = values_and_gradient(MultipleNegativesRanking.against)
    engine_values, engine_gradient = values_and_gradient(PairLoss.against)
    np.testing.assert_allclose(fast_values, engine_values, rtol=1e-5, atol=1e-6)
    # float32 rounding: P @ d - d cancels where the diagonal's probability is near 1
    np.testing.assert_allclose(fast_gradient, engine_gradient, rtol=1e-4, atol=1e-5)
    if len(np.unique(labels)) > 1:
        assert np.abs(fast_gradient).max() > 1e-3  # a gradient that can differ
    else:  # every document shares the query's label: an empty pool, value 0
        np.testing.assert_array_equal(fast_values, 0.0)


def test_multiple_negatives_ranking_rejects_odd_width():
    with pytest.raises(ValueError, match="odd"):
        MultipleNegativesRanking()(np.arange(4), np.ones((4, 5), "float32"))


def test_two_tower_dml_model_trains_and_saves(tmp_path):
    from keras_dml.models import DMLModel

    rng = np.random.default_rng(0)
    queries = rng.normal(size=(256, 12)).astype("float32")
    documents = (queries @ rng.normal(size=(12, 12)) + 0.1 * rng.normal(size=(256, 12)))
    documents = documents.astype("float32")
    q_in, d_in = keras.Input((12,), name="query"), keras.Input((12,), name="document")
    q_tower = keras.layers.Dense(8, name="query_tower")(q_in)
    d_tower = keras.layers.Dense(8, name="document_tower")(d_in)
    model = DMLModel([q_in, d_in], keras.layers.Concatenate()([q_tower, d_tower]))
    model.compile(keras.optimizers.Adam(1e-2), loss="keras_dml>MultipleNegativesRanking")
    ids = np.arange(256)
    before = model.evaluate([queries, documents], ids, batch_size=64, verbose=0)
    model.fit([queries, documents], ids, batch_size=64, epochs=8, verbose=0)
    after = model.evaluate([queries, documents], ids, batch_size=64, verbose=0)
    assert after < 0.5 * before
    path = str(tmp_path / "two_tower.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.evaluate([queries, documents], ids, batch_size=64,
                                               verbose=0), after, rtol=1e-5)


@pytest.mark.parametrize("make, match", [
    (lambda: MultipleNegativesRanking(0), "scale"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
