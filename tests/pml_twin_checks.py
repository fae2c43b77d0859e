"""Helpers of the tests that compare a keras_dml loss with its pytorch-metric-learning
twin: both sides' value and gradients, and a gradient comparison on the gradient's scale."""

import numpy as np
import tensorflow as tf


def ours(loss, labels, embeddings, variables=()):
    """keras_dml's value and gradients w.r.t. the embeddings and `variables` (TensorFlow)."""
    x = tf.constant(embeddings)
    with tf.GradientTape() as tape:
        tape.watch(x)
        value = loss(labels, x)
    return float(value), [np.asarray(g) for g in tape.gradient(value, [x, *variables])]


def theirs(call, *arrays):
    """`call(*tensors)`'s value and gradients w.r.t. the tensors, in float64 PyTorch."""
    import torch

    tensors = [torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in arrays]
    value = call(*tensors)
    value.backward()
    return value.item(), [t.grad.numpy() for t in tensors]


def assert_gradients_close(mine, peer, rtol=1e-5):
    """Equal within `rtol` of the larger gradient's largest entry (float32 against float64)."""
    for a, b in zip(mine, peer):
        scale = max(np.abs(b).max(), 1e-12)
        np.testing.assert_allclose(np.asarray(a) / scale, np.asarray(b) / scale, rtol=rtol,
                                   atol=rtol)


def central_differences(function, x, step=1e-6):
    """d function / d x of a float64 NumPy function, by central differences."""
    x = np.array(x, np.float64)
    gradient = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        up, down = x.copy(), x.copy()
        up[index] += step
        down[index] -= step
        gradient[index] = (function(up) - function(down)) / (2 * step)
    return gradient


def unit_rows(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(x.dtype)
