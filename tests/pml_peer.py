"""pytorch-metric-learning 2.9 as the peer of a keras_dml loss: value and gradient.

PML runs in float64 on PyTorch; keras_dml's loss runs in float32 on TensorFlow
(`loss_checks.value_and_gradient`). PyTorch is imported by the tests that call it
(marked `requires("torch", "pytorch_metric_learning")`), not by this module.
"""

import numpy as np
import pytest

import loss_checks as checks

#: (classes, samples per class) of the compared C x k batches
BATCHES = [(4, 3), (8, 2), (3, 5), (6, 4)]


def peer_test(test):
    """A PML comparison's marks: slow, needs PyTorch and PML, over `BATCHES` (`classes`,
    `k`) and both input forms (`form`, "raw" and "unit", see `inputs`)."""
    marks = [pytest.mark.slow, pytest.mark.requires("torch", "pytorch_metric_learning"),
             pytest.mark.parametrize("form", ["raw", "unit"]),
             pytest.mark.parametrize("classes, k", BATCHES)]
    for mark in marks:
        test = mark(test)
    return test


def inputs(classes, k, seed, form):
    """C x k labels and (N, 16) embeddings: raw Gaussian or L2-normalised ("unit")."""
    labels, x = checks.batch(classes=classes, k=k, dim=16, seed=seed)
    if form == "unit":
        x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")
    return labels, x


def value_and_gradient(pml_loss, labels, x, normalize_first=False):
    """PML's value and d value / d x in float64; `normalize_first` feeds it x / ||x||."""
    import torch

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    fed = torch.nn.functional.normalize(xt, dim=1) if normalize_first else xt
    value = pml_loss(fed, torch.tensor(labels, dtype=torch.long))
    value.backward()
    return float(value.detach()), xt.grad.numpy()


def assert_equals_pml(loss, pml_loss, labels, x, normalize_first=False):
    """Value to float32 rounding (rtol 1e-5) and the gradient within 1e-5 of its scale."""
    value, gradient = checks.value_and_gradient(loss, labels, x)
    expected, expected_gradient = value_and_gradient(pml_loss, labels, x, normalize_first)
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-7)
    scale = max(np.abs(expected_gradient).max(), 1e-12)
    np.testing.assert_allclose(gradient / scale, expected_gradient / scale, rtol=1e-5,
                               atol=1e-5)
