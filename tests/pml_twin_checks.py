"""Helpers of the tests that compare a keras_dml loss with its pytorch-metric-learning 2.9
twin: both sides' value and gradients, a gradient comparison on the gradient's scale
(the classifier and two-view losses), and `against_pml` with `assert_equals_pml` (value
and gradient w.r.t. the embeddings, raw or L2-normalised, on C x k batches: FastAP, PNP,
DynamicSoftMargin, ThresholdConsistentMargin and Manifold)."""

import numpy as np
import pytest

import loss_checks as checks


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


#: (classes, k) of the compared batches: 12, 16 and 15 samples
BATCHES = [(4, 3), (8, 2), (3, 5)]


def against_pml(test):
    """Marks a comparison with PML: slow (a peer reference), needs PyTorch and PML, and
    runs over `BATCHES`, raw and L2-normalised (arguments classes, k, normalised)."""
    batches = [pytest.param(c, k, unit, id=f"{c}x{k}-{'unit' if unit else 'raw'}")
               for c, k in BATCHES for unit in (False, True)]
    marks = [pytest.mark.slow, pytest.mark.requires("torch", "pytorch_metric_learning"),
             pytest.mark.parametrize("classes, k, normalised", batches)]
    for mark in marks:
        test = mark(test)
    return test


def pml_value_and_gradient(pml_loss, labels, x):
    """The PML loss of float64 copies of `x` and its gradient w.r.t. them."""
    import torch

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    value = pml_loss(xt, torch.tensor(labels, dtype=torch.long))
    value.backward()
    return float(value.detach()), xt.grad.numpy()


def compared_batch(classes, k, normalised, seed=0, dim=16):
    """C x k labels and embeddings, L2-normalised or raw (scale 0.7)."""
    labels, x = checks.batch(classes=classes, k=k, dim=dim, seed=seed + 10 * classes + k,
                             scale=0.7)
    if normalised:
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")
    return labels, x


def assert_equals_pml(loss, pml_loss, labels, x, rtol=1e-5):
    """Value within `rtol`, gradient within `rtol` of the gradient's scale."""
    value, gradient = checks.value_and_gradient(loss, labels, x)
    expected, expected_gradient = pml_value_and_gradient(pml_loss, labels, x)
    np.testing.assert_allclose(value, expected, rtol=rtol, atol=1e-7)
    scale = max(np.abs(expected_gradient).max(), 1e-12)
    np.testing.assert_allclose(gradient / scale, expected_gradient / scale, rtol=rtol,
                               atol=rtol)
    return value, gradient
