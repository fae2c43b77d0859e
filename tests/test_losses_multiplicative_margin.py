"""LargeMarginSoftmax and SphereFace: the multiple-angle formula, NumPy loops of the
papers' equations (value and gradient through the cosines and the norms), and
pytorch-metric-learning 2.9 with the same class weights (value, gradients, logits)."""

import keras
import numpy as np
import pytest

import backend_checks
import loss_checks as checks
import pml_twin_checks as twin
import proxy_checks
import reference_classifier_and_view_family as ref
from keras_dml.losses import LargeMarginSoftmax, SphereFace
from keras_dml.losses.multiplicative_margin import multiple_angle_cosine

C, DIM = 5, 8


def batch(n=15, seed=0, normalised=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, DIM)).astype("float32")
    return (np.arange(n) % C).astype("int32"), twin.unit_rows(x) if normalised else x


@pytest.mark.parametrize("margin", [1, 2, 3, 4, 5, 6])
def test_multiple_angle_formula_is_cos_m_theta_and_its_derivative(margin):
    cosine = np.linspace(-0.999, 0.999, 41).astype("float32")
    value, slope = multiple_angle_cosine(keras.ops.convert_to_tensor(cosine), margin)
    theta = np.arccos(cosine.astype("float64"))
    np.testing.assert_allclose(value, np.cos(margin * theta), atol=2e-5)
    # d cos(m theta) / d cos theta = m sin(m theta) / sin(theta)
    np.testing.assert_allclose(slope, margin * np.sin(margin * theta) / np.sin(theta),
                               rtol=1e-4, atol=1e-3)


SETTINGS = [(LargeMarginSoftmax, 4, 1.0), (LargeMarginSoftmax, 2, 3.0),
            (SphereFace, 4, 1.0), (SphereFace, 3, 2.0)]


@pytest.mark.parametrize("cls, margin, scale", SETTINGS)
def test_matches_the_papers_loop_with_exact_weights_and_gradient(cls, margin, scale):
    loss = cls(C, margin=margin, scale=scale)
    labels, x = batch(n=6, seed=3)
    weights = proxy_checks.with_proxies(loss, DIM)
    unit = cls is SphereFace

    def reference(x_, w_=weights):
        return ref.multiplicative_margin_softmax(x_, labels, w_, margin, scale, unit)

    value, (dx, dw) = twin.ours(loss, labels, x, [loss.proxies])
    np.testing.assert_allclose(value, reference(x.astype("float64")), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x, atol=1e-5)
    # the norms' path too: the whole gradient against differences of the loop
    twin.assert_gradients_close(
        [dx, dw], [backend_checks.finite_difference(reference, x),
                   backend_checks.finite_difference(lambda w: reference(x.astype("float64"), w),
                                            weights)], rtol=1e-4)


def test_zero_embedding_is_finite():
    loss = LargeMarginSoftmax(C)
    proxy_checks.with_proxies(loss, DIM)
    labels, x = batch(n=5)
    x[2] = 0.0
    value, gradient = checks.value_and_gradient(loss, labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


@pytest.mark.parametrize("make, match", [
    (lambda: LargeMarginSoftmax(C, margin=0), "margin"),
    (lambda: SphereFace(C, margin=2.5), "margin"),
    (lambda: SphereFace(C, scale=0.0), "scale"),
    (lambda: LargeMarginSoftmax(0), "num_classes"),
])
def test_bad_arguments_are_named(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.requires("torch", "pytorch_metric_learning")
@pytest.mark.parametrize("cls", [LargeMarginSoftmax, SphereFace])
@pytest.mark.parametrize("margin, scale", [(4, 1.0), (2, 3.0), (3, 1.0), (1, 1.0)])
@pytest.mark.parametrize("n, normalised", [(7, False), (20, True), (64, False)])
def test_equals_pytorch_metric_learning_with_the_same_weights(cls, margin, scale, n,
                                                              normalised):
    import torch
    from pytorch_metric_learning import losses as pml

    loss = cls(C, margin=margin, scale=scale)
    labels, x = batch(n=n, seed=n, normalised=normalised)
    proxy_checks.with_proxies(loss, DIM, seed=n + 1)
    peer = {LargeMarginSoftmax: pml.LargeMarginSoftmaxLoss,
            SphereFace: pml.SphereFaceLoss}[cls](C, DIM, margin=margin, scale=scale).double()
    dw, peer_dw = twin.assert_equals_peer_classifier(loss, peer, peer.W, labels, x)
    twin.assert_gradients_close([dw], [peer_dw])
    logits = peer.get_logits(torch.tensor(x, dtype=torch.float64)).detach().numpy()
    np.testing.assert_allclose(loss.logits(x), logits, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_dml_model_trains_saves_and_classifies(tmp_path):
    checks.assert_classifier_trains_and_reloads(SphereFace(C, margin=2, scale=4.0), C,
                                                tmp_path, epochs=40)
