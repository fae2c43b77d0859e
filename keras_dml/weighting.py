"""The pair-weighting engine: a loss is a value plus a weight per pair.

The unified view of deep metric learning (Wang et al., "A Unified View of
Pair-based Deep Metric Learning", Theorem 3.1) shows that, for training, every
pair-based loss is nothing but a weight per pair, w_ij = |dL/dS_ij|. This module
turns that statement into code (see docs/architecture.md for the whole flow):

    batch x reference set --similarity--> M (N x M) --masks/mining--> kept pairs
        --loss.compute_terms--> (value, W = d value / d M)
        --tf.custom_gradient--> backward pass uses W (and not M)

so a loss declares its value and its weights once, the backward pass costs one
multiply by W, and reweighting losses (ICE) may state weights that are not the
derivative of their value. `pair_weights` exposes the unified view's w_ij.
"""

import numpy as np
import tensorflow as tf


def weighted_pair_loss(sources, tape, matrix, terms_fn, parameters=()):
    """Value of a pair loss whose gradient w.r.t. `matrix` is the loss's pair weights.

    The custom gradient is taken w.r.t. `sources`, the tensors `matrix` was built
    from under `tape`: its backward pass is `tape.gradient(matrix, sources,
    upstream * weights)`. So the backward pass keeps W and what the matrix's own
    backward needs (the unit embeddings), never the matrix or the masks: they are
    freed once the forward pass is done with them (an N x N float32 each).

    Args:
        sources: tensors (or variables) the matrix is differentiated back to (the
            embeddings, trainable keys); watched by `tape`.
        tape: a persistent `tf.GradientTape` that recorded `matrix` from `sources`.
        matrix: float32 (N, M) similarity or distance matrix (query x key).
        terms_fn: function `(matrix, *parameters) -> (value, weights)`, plus the
            gradients of `parameters` when there are any. `value` is either a
            per-query vector (N,) whose entry a depends only on row a of
            `matrix`, with `weights[a, :] = d value[a] / d matrix[a, :]`; or a
            scalar, with `weights = d value / d matrix`.
        parameters: other differentiable inputs (e.g. a per-query boundary (N,));
            the gradient of parameter p is upstream * (its stated gradient).

    Returns:
        `value`, with the custom gradient: `upstream * weights` back through the
        matrix to `sources`.
    """
    sources, parameters = tuple(sources), tuple(parameters)

    @tf.custom_gradient
    def _loss(*inputs):
        out = terms_fn(matrix, *inputs[len(sources):])
        value, weights = out[0], tf.stop_gradient(out[1])
        stated = [tf.stop_gradient(g) for g in out[2]] if parameters else []

        def grad(upstream):
            rows = upstream[:, tf.newaxis] if value.shape.rank == 1 else upstream
            through_matrix = tape.gradient(
                matrix, sources, output_gradients=rows * weights,
                unconnected_gradients=tf.UnconnectedGradients.ZERO)
            return ([tf.convert_to_tensor(g) for g in through_matrix]
                    + [upstream * g for g in stated])

        return value, grad

    return _loss(*sources, *parameters)


def pair_weights(loss, labels, embeddings, reference=None):
    """The unified view's non-negative pair weights w_ij of `loss` on one batch.

    w_ij = -dL/dS_ij on positive pairs and +dL/dS_ij on negative pairs (for a
    distance matrix D, the signs flip, since dS = -dD), 0 elsewhere, where L is the
    batch loss with Keras' default reduction (mean over queries).

    Args:
        loss: a keras_dml loss (a `keras_dml.losses.PairLoss`).
        labels: int array (N,).
        embeddings: float array (N, d).
        reference: optional `keras_dml.losses.Reference` (default: the batch, or
            the loss's proxies).

    Returns:
        np.ndarray float32 (N, M): (N, N) for in-batch losses (also when the keys
        are drawn from the batch, as N-pair-mc's), (N, C K) for proxies, (N, M)
        against a reference set of M keys.
    """
    terms = loss.terms(labels, embeddings, reference)
    derivative = terms.weights
    if terms.value.shape.rank == 1:
        derivative = derivative / tf.cast(tf.shape(terms.value)[0], tf.float32)
    sign = 1.0 if terms.is_distance else -1.0
    weights = tf.where(
        terms.positive,
        sign * derivative,
        tf.where(terms.negative, -sign * derivative, tf.zeros_like(derivative)),
    )
    reference = terms.reference
    if reference is not None and reference.rows is not None:  # keys drawn from the batch
        n = tf.shape(embeddings)[0]
        rows = tf.where(reference.query_rows >= 0, reference.query_rows, n)
        index = tf.stack(tf.meshgrid(rows, reference.rows, indexing="ij"), axis=-1)
        weights = tf.scatter_nd(index, weights, [n + 1, n])[:n]
    return np.asarray(weights)


def autodiff_weights(loss, labels, embeddings, reference=None):
    """(d value / d matrix by plain autodiff, the loss's stated W), for checking W.

    Both in the layout of `terms.weights`: per-row derivatives for per-query
    values. Used by tests to prove that a loss's W is the exact derivative.
    """
    labels, embeddings, reference = loss.prepare(labels, embeddings, reference)
    matrix = loss.pair_matrix(embeddings, reference)
    pairs = loss.pairs(labels, reference, matrix)
    parameters = loss.parameters(pairs)
    with tf.GradientTape() as tape:
        tape.watch(matrix)
        value, weights = loss.compute_terms(matrix, pairs, *parameters)[:2]
        total = tf.reduce_sum(value)
    return np.asarray(tape.gradient(total, matrix)), np.asarray(weights)
