"""Helpers of the tests that compare a keras_dml loss with its pytorch-metric-learning
twin: both sides' value and gradients, and a gradient comparison on the gradient's scale."""

import numpy as np


def ours(loss, labels, embeddings, variables=()):
    """keras_dml's value and gradients w.r.t. the embeddings and `variables` (TensorFlow)."""
    import tensorflow as tf

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


def assert_equals_peer_classifier(loss, peer, peer_weight, labels, x):
    """Our proxies copied into the PML classifier's (d, C) `peer_weight`: equal values
    and embedding gradients. Returns (our proxies' gradient, PML's as (C, d))."""
    import torch

    with torch.no_grad():
        peer_weight.copy_(torch.tensor(np.asarray(loss.proxies).T, dtype=torch.float64))
    expected, (expected_dx,) = theirs(
        lambda x_: peer(x_, torch.tensor(labels, dtype=torch.long)), x)
    value, (dx, dw) = ours(loss, labels, x, [loss.proxies])
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    assert_gradients_close([dx], [expected_dx])
    return dw, peer_weight.grad.numpy().T


def unit_rows(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(x.dtype)
