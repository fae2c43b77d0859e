"""Instance loss: label ranks, the NumPy loop of PML's batch form (value, exact W, the
whole gradient) and pytorch-metric-learning 2.9's `InstanceLoss`."""

import numpy as np
import pytest

import backend_checks
import loss_checks as checks
import pml_twin_checks as twin
import reference_classifier_and_view_family as ref
from keras_dml.losses import Instance, Reference
from keras_dml.losses.instance import label_ranks

DIM = 8
#: instance ids (each its own target), a sorted C x k batch, unsorted labels with gaps,
#: and two stacked views [Z; Z'] of 6 instances
LAYOUTS = {
    "instances": np.arange(12),
    "classes": np.repeat(np.arange(4), 3),
    "unsorted": np.array([3, 1, 3, 2, 1, 1, 0, 2, 9, 0, 7, 7]),
    "stacked_views": np.tile(np.arange(6), 2),
}


def test_label_ranks_are_the_index_among_the_distinct_labels():
    labels = np.random.default_rng(0).integers(0, 50, size=40)
    expected = np.unique(labels, return_inverse=True)[1]
    np.testing.assert_array_equal(label_ranks(labels.astype("int32")), expected)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_matches_the_loop_with_exact_weights_and_gradient(layout):
    labels = LAYOUTS[layout].astype("int32")
    x = np.random.default_rng(1).normal(size=(len(labels), DIM)).astype("float32")
    loss = Instance(gamma=4.0)

    def reference(x_):
        return ref.instance(x_, labels, 4.0)

    value, (dx,) = twin.ours(loss, labels, x)
    np.testing.assert_allclose(value, reference(x.astype("float64")), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)
    twin.assert_gradients_close([dx], [backend_checks.finite_difference(reference, x)], rtol=1e-4)


def test_own_target_weight_is_exact_where_its_probability_rounds_to_one():
    """Each sample its own target at gamma 64: p_ii rounds to 1 in float32; the target's
    weight, -gamma sum_{j != i} p_ij, is still the row's exact balance."""
    x = np.random.default_rng(2).normal(size=(12, DIM)).astype("float32")
    weights = checks.assert_exact_weights(Instance(), np.arange(12), x)
    np.testing.assert_allclose(weights.sum(axis=1), 0.0, atol=1e-9)


def test_takes_no_reference_set_and_checks_gamma():
    x = np.ones((4, DIM), "float32")
    with pytest.raises(ValueError, match="no reference set"):
        Instance()(np.arange(4), x, reference=Reference(np.arange(4), x))
    with pytest.raises(ValueError, match="gamma"):
        Instance(gamma=0.0)


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.requires("torch", "pytorch_metric_learning")
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("gamma", [64.0, 1.0])
@pytest.mark.parametrize("normalised", [False, True])
def test_equals_pytorch_metric_learning(layout, gamma, normalised):
    import torch
    from pytorch_metric_learning import losses as pml

    labels = LAYOUTS[layout].astype("int32")
    x = np.random.default_rng(len(layout)).normal(size=(len(labels), DIM)).astype("float32")
    x = twin.unit_rows(x) if normalised else 3.0 * x
    peer = pml.InstanceLoss(gamma=gamma)
    expected, expected_gradient = twin.theirs(
        lambda x_: peer(x_, torch.tensor(labels, dtype=torch.long)), x)
    value, gradient = twin.ours(Instance(gamma=gamma), labels, x)
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    twin.assert_gradients_close(gradient, expected_gradient)


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.requires("torch", "pytorch_metric_learning")
def test_equals_pytorch_metric_learning_on_a_large_batch():
    import torch
    from pytorch_metric_learning import losses as pml

    labels = np.tile(np.arange(64), 2).astype("int32")
    x = np.random.default_rng(7).normal(size=(128, 32)).astype("float32")
    expected, expected_gradient = twin.theirs(
        lambda x_: pml.InstanceLoss()(x_, torch.tensor(labels, dtype=torch.long)), x)
    value, gradient = twin.ours(Instance(), labels, x)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    twin.assert_gradients_close(gradient, expected_gradient)
