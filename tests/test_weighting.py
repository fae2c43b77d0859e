"""The pair-weighting engine: the backward pass uses the declared weights W."""

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses, mining, weighting
from keras_dml.backend import gradients
from keras_dml.losses.base import PairLoss


def _batch(classes=4, per_class=3, d=8, seed=0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class).astype("int32")
    return labels, rng.normal(size=(classes * per_class, d)).astype("float32")


class _StatedWeights(PairLoss):
    """A loss whose stated weights are deliberately not the derivative of its value."""

    def compute_terms(self, matrix, pairs):
        value = tf.reduce_sum(tf.where(pairs.negative, matrix, 0.0), axis=1)
        weights = (tf.cast(pairs.negative, tf.float32) * 3.0
                   - tf.cast(pairs.positive, tf.float32) * 2.0)
        return value, weights


def test_backward_pass_uses_the_stated_weights_not_autodiff():
    labels, x = _batch()
    loss = _StatedWeights()
    labels, x, reference = loss.prepare(labels, x)
    source = tf.Variable(loss.pair_matrix(x, reference))
    with tf.GradientTape() as tape:
        matrix = gradients.differentiable_matrix(tf.identity, [source])
        pairs = loss.pairs(labels, reference, matrix.matrix)
        pos, neg = pairs.positive, pairs.negative
        value = weighting.weighted_pair_loss(matrix, lambda m: loss.compute_terms(m, pairs))
        total = tf.reduce_mean(value)
    grad = tape.gradient(total, source).numpy()
    expected = (3.0 * neg.numpy() - 2.0 * pos.numpy()) / len(labels)
    np.testing.assert_allclose(grad, expected, rtol=1e-6)


def test_gradient_reaches_both_embeddings_of_every_pair_through_normalisation():
    labels, x = _batch()
    loss = _StatedWeights()
    xv = tf.Variable(x)
    with tf.GradientTape() as tape:
        value = loss(labels, xv)
    grad = tape.gradient(value, xv).numpy()
    # Chain rule by hand: dS = W / N (symmetric use of both sides), S = n(x) n(x)^T.
    terms = loss.terms(labels, x)
    pos, neg = terms.positive, terms.negative
    w = (3.0 * neg.numpy() - 2.0 * pos.numpy()) / len(labels)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = x / norms
    d_unit = (w + w.T) @ unit
    expected = (d_unit - unit * (d_unit * unit).sum(1, keepdims=True)) / norms
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("loss", [
    losses.MultiSimilarity(),
    losses.MultiSimilarity(miner=None),
    losses.MultiSimilarity(alpha=5.0, beta=20.0, base=0.2, miner=mining.MultiSimilarityMiner(0.3)),
    losses.Contrastive(),
    losses.Contrastive(pos_margin=0.7, neg_margin=0.1),
    losses.Contrastive(metric="euclidean", neg_margin=1.5),
], ids=["MultiSimilarity", "MultiSimilarity-no-mining", "MultiSimilarity-other",
        "Contrastive", "Contrastive-margins", "Contrastive-euclidean"])
def test_weights_are_the_exact_derivative_of_the_value(loss):
    for seed in range(3):
        labels, x = _batch(seed=seed)
        autodiff, stated = weighting.autodiff_weights(loss, labels, x)
        np.testing.assert_allclose(stated, autodiff, rtol=1e-5, atol=1e-7)


def test_pair_weights_follow_the_unified_view_sign_convention():
    labels, x = _batch()
    loss = losses.MultiSimilarity(miner=None)
    w = weighting.pair_weights(loss, labels, x)
    terms = loss.terms(labels, x)
    assert w.shape == (12, 12) and (w >= 0).all()
    pos, neg = terms.positive.numpy(), terms.negative.numpy()
    np.testing.assert_allclose(w[pos], -terms.weights.numpy()[pos] / 12, rtol=1e-6)
    np.testing.assert_allclose(w[neg], terms.weights.numpy()[neg] / 12, rtol=1e-6)
    assert (w[~(pos | neg)] == 0).all()


def test_pair_weights_are_non_negative_for_distance_losses_too():
    labels, x = _batch()
    w = weighting.pair_weights(losses.Contrastive(metric="euclidean", neg_margin=10.0),
                               labels, x)
    assert (w >= 0).all() and (w > 0).any()


@pytest.mark.parametrize("loss", [losses.MultiSimilarity(), losses.Contrastive(),
                                  losses.Contrastive(metric="euclidean")],
                         ids=lambda loss: type(loss).__name__)
@pytest.mark.parametrize("labels", [np.arange(6), np.zeros(6), np.array([0, 0, 1, 1, 2, 3])],
                         ids=["no-positives", "one-class", "k=1-mixed"])
def test_degenerate_batches_are_finite(loss, labels):
    x = tf.Variable(np.random.default_rng(0).normal(size=(6, 4)).astype("float32"))
    with tf.GradientTape() as tape:
        value = loss(labels.astype("int32"), x)
    grad = tape.gradient(value, x)
    assert np.isfinite(value.numpy()) and np.isfinite(grad.numpy()).all()


def test_no_positive_pair_gives_zero_loss_and_zero_gradient_for_multi_similarity():
    x = tf.Variable(np.random.default_rng(0).normal(size=(5, 4)).astype("float32"))
    with tf.GradientTape() as tape:
        value = losses.MultiSimilarity()(np.arange(5), x)
    assert float(value) == 0.0
    assert not np.any(tape.gradient(value, x).numpy())
