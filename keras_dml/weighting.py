"""The pair-weighting engine: a loss is a value plus a weight per pair.

The unified view of deep metric learning (Wang et al., "A Unified View of
Pair-based Deep Metric Learning", Theorem 3.1) shows that, for training, every
pair-based loss is nothing but a weight per pair, w_ij = |dL/dS_ij|. This module
turns that statement into code:

    embeddings --similarity--> M (query x key) --masks/mining--> kept pairs
        --loss.pair_terms--> (value per anchor, W = d value / d M)
        --tf.custom_gradient--> backward pass uses W

so a loss declares its value and its weights once, the backward pass costs one
multiply by W, and reweighting losses (ICE) may state weights that are not the
derivative of their value. `pair_weights` exposes the unified view's w_ij.
"""

import numpy as np
import tensorflow as tf


def weighted_pair_loss(matrix, terms_fn):
    """Value of a pair loss whose gradient w.r.t. `matrix` is the loss's pair weights.

    Args:
        matrix: float32 (N, M) similarity or distance matrix (query x key).
        terms_fn: function `matrix -> (value, weights)`. `value` is either a
            per-anchor vector (N,) whose entry a depends only on row a of
            `matrix`, with `weights[a, :] = d value[a] / d matrix[a, :]`; or a
            scalar, with `weights = d value / d matrix`.

    Returns:
        `value`, with the custom gradient `upstream * weights`.
    """

    @tf.custom_gradient
    def _loss(m):
        value, weights = terms_fn(m)
        weights = tf.stop_gradient(weights)

        def grad(upstream):
            if value.shape.rank == 1:
                upstream = upstream[:, tf.newaxis]
            return upstream * weights

        return value, grad

    return _loss(matrix)


def pair_weights(loss, labels, embeddings):
    """The unified view's non-negative pair weights w_ij of `loss` on one batch.

    w_ij = -dL/dS_ij on positive pairs and +dL/dS_ij on negative pairs (for a
    distance matrix D, the signs flip, since dS = -dD), 0 elsewhere, where L is the
    batch loss with Keras' default reduction (mean over anchors).

    Args:
        loss: a keras_dml pair loss (anything with `pair_terms_for_batch`).
        labels: int array (N,).
        embeddings: float array (N, d).

    Returns:
        np.ndarray float32 (N, M): (N, N) for in-batch losses, (N, C) for proxies.
    """
    terms = loss.pair_terms_for_batch(labels, embeddings)
    derivative = terms.weights
    if terms.value.shape.rank == 1:
        derivative = derivative / tf.cast(tf.shape(terms.value)[0], tf.float32)
    sign = 1.0 if terms.is_distance else -1.0
    weights = tf.where(
        terms.positive,
        sign * derivative,
        tf.where(terms.negative, -sign * derivative, tf.zeros_like(derivative)),
    )
    return np.asarray(weights)


def autodiff_weights(loss, labels, embeddings):
    """d value / d matrix by plain autodiff (no custom gradient), for checking W.

    Returns the same layout as `terms.weights`: per-row derivatives for per-anchor
    values. Used by tests to prove that a loss's W is the exact derivative.
    """
    labels, embeddings = loss.validate(labels, embeddings)
    matrix = loss.pair_matrix(embeddings)
    with tf.GradientTape() as tape:
        tape.watch(matrix)
        terms = loss.pair_terms(matrix, labels)
        total = tf.reduce_sum(terms.value)
    return np.asarray(tape.gradient(total, matrix)), np.asarray(terms.weights)

