"""P2SGrad: the NumPy loop of its loss (value, exact W, the whole gradient) and
pytorch-metric-learning 2.9's `P2SGradLoss` with the same class weights."""

import numpy as np
import pytest

import backend_checks
import loss_checks as checks
import pml_twin_checks as twin
import reference_classifier_and_view_family as ref
from keras_dml.losses import P2SGrad

C, DIM = 5, 8


def with_unit_weights(loss, seed=1):
    """Unit class weights (PML rescales its W to unit columns before each call)."""
    loss.trainable_layer.build((None, DIM))
    rng = np.random.default_rng(seed)
    values = twin.unit_rows(rng.normal(size=loss.proxies.shape).astype("float32"))
    loss.proxies.assign(values)
    return values


def batch(n=12, seed=0, normalised=False):
    x = np.random.default_rng(seed).normal(size=(n, DIM)).astype("float32")
    return (np.arange(n) % C).astype("int32"), twin.unit_rows(x) if normalised else x


def test_matches_the_loop_with_exact_weights_and_gradient():
    loss = P2SGrad(C)
    weights = with_unit_weights(loss)
    labels, x = batch(n=7, seed=2)

    def reference(x_):
        return ref.p2sgrad(x_, labels, weights.astype("float64"))

    value, (dx,) = twin.ours(loss, labels, x)
    np.testing.assert_allclose(value, reference(x.astype("float64")), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)
    twin.assert_gradients_close([dx], [backend_checks.finite_difference(reference, x)], rtol=1e-4)


def test_a_perfect_classifier_has_zero_loss():
    loss = P2SGrad(3)
    loss.trainable_layer.build((None, 3))
    loss.proxies.assign(np.eye(3, dtype="float32"))
    labels = np.array([0, 1, 2, 1], "int32")
    value, gradient = checks.value_and_gradient(loss, labels, 2.0 * np.eye(3, dtype="f")[labels])
    assert value == pytest.approx(0.0, abs=1e-7) and np.abs(gradient).max() < 1e-6


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_classes"):
        P2SGrad(0)
    with pytest.raises(ValueError, match="proxy_lr_multiplier"):
        P2SGrad(C, proxy_lr_multiplier=0.0)


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.requires("torch", "pytorch_metric_learning")
@pytest.mark.parametrize("n, normalised", [(5, False), (20, True), (64, False)])
def test_equals_pytorch_metric_learning_with_the_same_weights(n, normalised):
    from pytorch_metric_learning import losses as pml

    loss = P2SGrad(C)
    weights = with_unit_weights(loss, seed=n)
    labels, x = batch(n=n, seed=n + 1, normalised=normalised)
    peer = pml.P2SGradLoss(DIM, C).double()
    dw, peer_dw = twin.assert_equals_peer_classifier(loss, peer, peer.weight, labels, x)
    # PML differentiates x . W at unit W; ours is the cosine's gradient: its tangent part
    tangent = peer_dw - np.sum(peer_dw * weights, axis=1, keepdims=True) * weights
    twin.assert_gradients_close([dw], [tangent])
