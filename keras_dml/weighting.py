"""The pair-weighting engine: a loss is a value plus a weight per pair.

The unified view of deep metric learning (Wang et al., "A Unified View of
Pair-based Deep Metric Learning", Theorem 3.1) shows that, for training, every
pair-based loss is nothing but a weight per pair, w_ij = |dL/dS_ij|. This module
turns that statement into code (see docs/architecture.md for the whole flow):

    batch x reference set --similarity--> M (N x M) --masks/mining--> kept pairs
        --loss.compute_terms--> (value, W = d value / d M)
        --keras.ops.custom_gradient--> backward pass uses W (and not M)

so a loss declares its value and its weights once, the backward pass costs one
multiply by W, and reweighting losses (ICE) may state weights that are not the
derivative of their value. A loss that writes its value only gets W from the
backend's autodiff (`value_terms`); `check_terms` checks what a loss returns.
`pair_weights` exposes the unified view's w_ij.
"""

import keras
import numpy as np

from keras_dml.backend import gradients, primitives

__all__ = ["autodiff_weights", "check_terms", "pair_weights", "value_terms",
           "weighted_pair_loss"]


def _compatible(shape, expected):
    return len(shape) == len(expected) and all(
        a is None or b is None or a == b for a, b in zip(shape, expected))


def check_terms(loss, out, matrix, parameters=()):
    """`out`, the `(value, weights[, parameter gradients])` of `loss.compute_terms`,
    after checking its static shapes against the (N, M) `matrix`.

    The value must be per query (N,) or a scalar, the weights (N, M), each parameter
    gradient its parameter's shape. Only static shapes are read: a traced step
    checks once, when traced, and runs nothing more.

    Raises:
        ValueError: naming the loss class and the shapes.
    """
    owner = type(loss).__name__
    if not isinstance(out, (tuple, list)) or len(out) < 2:
        raise ValueError(f"{owner}.compute_terms must return (value, weights), got "
                         f"{type(out).__name__}.")
    value, weights = out[0], out[1]
    shape = tuple(matrix.shape)
    value_shape, weights_shape = tuple(value.shape), tuple(weights.shape)
    if not (value_shape == () or _compatible(value_shape, shape[:1])) \
            or not _compatible(weights_shape, shape):
        raise ValueError(
            f"{owner}.compute_terms returned a value of shape {value_shape} and weights of "
            f"shape {weights_shape} for a matrix of shape {shape}: the value must be per "
            f"query ({shape[0]},) or a scalar (), and the weights must have the matrix's "
            f"shape {shape}.")
    if parameters:
        gradients_ = out[2] if len(out) > 2 else None
        if gradients_ is None or len(gradients_) != len(parameters):
            raise ValueError(f"{owner}.compute_terms takes {len(parameters)} parameters and "
                             "must return their gradients as a third item, one each.")
        for index, (parameter, gradient) in enumerate(zip(parameters, gradients_)):
            if not _compatible(tuple(gradient.shape), tuple(parameter.shape)):
                raise ValueError(
                    f"{owner}.compute_terms returned a gradient of shape "
                    f"{tuple(gradient.shape)} for parameter {index} of shape "
                    f"{tuple(parameter.shape)}: they must be equal.")
    return out


def value_terms(loss, matrix, pairs, *parameters):
    """`(value, W[, parameter gradients])` of a loss that writes only
    `compute_value(matrix, pairs, *parameters)`, by the backend's autodiff.

    W is d sum(value) / d matrix: for a per-query value whose entry a reads row a
    only, row a of W is d value[a] / d matrix[a]; for a scalar, d value / d matrix.
    A parameter's gradient is d sum(value) / d parameter. An entry off the pairs
    (a self-pair, a mined-away pair) whose derivative is not finite is 0: a masked
    `sqrt` at 0 or `arccos` at 1 on the diagonal gives NaN there, never read.

    Raises:
        ValueError: (eager) a non-finite derivative on a pair, naming the safe ops.
    """
    def value_at(index):
        def value(x):
            inputs = [matrix, *parameters]
            inputs[index] = x
            return loss.compute_value(inputs[0], pairs, *inputs[1:]), ()
        return value

    value, _, weights = gradients.value_and_gradient(value_at(0), matrix)
    if keras.backend.backend() == "torch":  # its autodiff returns a detached value
        value = loss.compute_value(matrix, pairs, *parameters)
    if pairs.positive is not None:
        on_pairs = keras.ops.logical_or(pairs.positive, pairs.negative)
        weights = keras.ops.where(
            keras.ops.logical_or(on_pairs, keras.ops.isfinite(weights)), weights, 0.0)
    if primitives.is_concrete(weights) and not np.all(
            np.isfinite(keras.ops.convert_to_numpy(weights))):
        raise ValueError(
            f"{type(loss).__name__}: the autodiff derivative of compute_value is not finite "
            "on some pairs (sqrt at 0 or arccos at +-1 have an infinite derivative): use "
            "keras_dml.ops.safe_sqrt and keras_dml.ops.safe_arccos, or write compute_terms "
            "with W by hand.")
    if not parameters:
        return value, weights
    stated = [gradients.value_and_gradient(value_at(index + 1), parameter)[2]
              for index, parameter in enumerate(parameters)]
    return value, weights, stated


def weighted_pair_loss(matrix, terms_fn, parameters=()):
    """Value of a pair loss whose gradient w.r.t. the matrix is the loss's pair weights.

    The custom gradient (`keras.ops.custom_gradient`) sends `upstream * weights` back
    through the matrix to the tensors it was built from (`matrix.gradients`, the
    VJP of the backend: a replayed `tf.GradientTape` on TensorFlow, so its backward
    pass keeps W and what the matrix's own backward needs (the unit embeddings),
    never the matrix or the masks; the framework's autodiff on JAX and PyTorch).

    Args:
        matrix: a `keras_dml.backend.gradients.MatrixGradient`, the float32 (N, M)
            similarity or distance matrix (query x key) and its sources
            (`gradients.differentiable_matrix`).
        terms_fn: function `(matrix, *parameters) -> (value, weights)`, plus the
            gradients of `parameters` when there are any. `value` is either a
            per-query vector (N,) whose entry a depends only on row a of
            `matrix`, with `weights[a, :] = d value[a] / d matrix[a, :]`; or a
            scalar, with `weights = d value / d matrix`.
        parameters: other differentiable inputs (e.g. a per-query boundary (N,));
            the gradient of parameter p is upstream * (its stated gradient).

    Returns:
        `value`, with the custom gradient: `upstream * weights` back through the
        matrix to its sources.
    """
    parameters = tuple(parameters)
    count = len(matrix.inputs)

    @keras.ops.custom_gradient
    def _loss(*inputs):
        out = terms_fn(matrix.matrix_of(inputs), *inputs[count:])
        value, weights = out[0], keras.ops.stop_gradient(out[1])
        stated = [keras.ops.stop_gradient(g) for g in out[2]] if parameters else []

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            rows = keras.ops.expand_dims(upstream, 1) if len(value.shape) == 1 else upstream
            return tuple(matrix.gradients(rows * weights) + [upstream * g for g in stated])

        return value, grad

    return _loss(*matrix.inputs, *parameters)


def pair_weights(loss, labels, embeddings, reference=None):
    """The unified view's signed pair weights w_ij of `loss` on one batch.

    w_ij = -dL/dS_ij on positive pairs and +dL/dS_ij on negative pairs (for a
    distance matrix D, the signs flip, since dS = -dD), 0 elsewhere, where L is the
    batch loss with Keras' default reduction (mean over queries; a batch-global
    value as it is). w_ij >= 0 where the loss pulls a positive closer or pushes a
    negative away, the unified view's case (Theorem 3.1). It can be negative: a loss
    whose exact derivative pushes a positive away or pulls a negative closer on some
    pairs (Ranked List's, whose per-anchor normalisation couples the pairs) gives
    w_ij < 0 there.

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
    derivative = keras.ops.convert_to_numpy(terms.weights)
    if len(terms.value.shape) == 1:
        derivative = derivative / np.float32(terms.value.shape[0])
    sign = 1.0 if terms.is_distance else -1.0
    positive = keras.ops.convert_to_numpy(terms.positive)
    negative = keras.ops.convert_to_numpy(terms.negative)
    weights = np.where(positive, sign * derivative,
                       np.where(negative, -sign * derivative, 0.0)).astype(np.float32)
    reference = terms.reference
    if reference is not None and reference.rows is not None:  # keys drawn from the batch
        n = embeddings.shape[0]
        rows = keras.ops.convert_to_numpy(reference.query_rows)
        rows = np.where(rows >= 0, rows, n)
        columns = keras.ops.convert_to_numpy(reference.rows)
        dense = np.zeros((n + 1, n), np.float32)
        np.add.at(dense, (rows[:, np.newaxis], columns[np.newaxis, :]), weights)
        weights = dense[:n]
    return weights


def autodiff_weights(loss, labels, embeddings, reference=None):
    """(d value / d matrix by plain autodiff, the loss's stated W), for checking W.

    Both in the layout of `terms.weights`: per-row derivatives for per-query
    values. Used by tests to prove that a loss's W is the exact derivative.
    """
    labels, embeddings, reference = loss.prepare(labels, embeddings, reference)
    matrix = loss.pair_matrix(embeddings, reference)
    pairs = loss.pairs(labels, reference, matrix)
    parameters = loss.parameters(pairs)
    _, weights, derivative = gradients.value_and_gradient(
        lambda m: tuple(check_terms(loss, loss.compute_terms(m, pairs, *parameters), m,
                                    parameters)[:2]),
        keras.ops.stop_gradient(matrix))
    return keras.ops.convert_to_numpy(derivative), keras.ops.convert_to_numpy(weights)
