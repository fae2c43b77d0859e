"""The comparison of a keras_dml loss with its pytorch-metric-learning 2.9 twin, shared
by the tests of FastAP, PNP, DynamicSoftMargin, ThresholdConsistentMargin and Manifold
(test_losses_<module>.py): value and gradient w.r.t. the embeddings, raw or
L2-normalised, on C x k batches."""

import numpy as np
import pytest

import loss_checks as checks

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
