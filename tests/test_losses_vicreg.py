"""VICReg: the NumPy loop of the paper's terms (value, exact invariance W, the whole
gradient), its two-view rows, and pytorch-metric-learning 2.9's `VICRegLoss`."""

import numpy as np
import pytest

import backend_checks
import loss_checks as checks
import pml_twin_checks as twin
import reference_classifier_and_view_family as ref
from keras_dml.losses import Reference, VICReg


def views(n=6, d=4, seed=0, noise=0.3):
    """(N, 2 d) rows: each instance's two views, the second a noisy copy of the first."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, d))
    return np.concatenate([z, z + noise * rng.normal(size=(n, d))], axis=1).astype("float32")


@pytest.mark.parametrize("kwargs", [{}, {"invariance_lambda": 1.0, "variance_mu": 5.0,
                                         "covariance_v": 3.0, "eps": 1e-2}])
def test_matches_the_loop_with_exact_weights_and_gradient(kwargs):
    loss = VICReg(**kwargs)
    x = views()
    labels = np.arange(len(x), dtype="int32")

    def reference(x_):
        return ref.vicreg(x_, loss.invariance_lambda, loss.variance_mu, loss.covariance_v,
                          loss.eps)

    value, (dx,) = twin.ours(loss, labels, x)
    np.testing.assert_allclose(value, reference(x.astype("float64")), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)
    twin.assert_gradients_close([dx], [backend_checks.finite_difference(reference, x)], rtol=1e-4)


def test_labels_are_not_used():
    x = views(seed=1)
    loss = VICReg()
    assert float(loss(np.zeros(6, "int32"), x)) == float(loss(np.arange(6), x))


def test_one_instance_is_finite():
    value, gradient = checks.value_and_gradient(VICReg(), np.zeros(1, "int32"), views(n=1))
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


def test_bad_rows_reference_and_arguments_are_named():
    with pytest.raises(ValueError, match="width 5, which is odd"):
        VICReg()(np.arange(3), np.ones((3, 5), "float32"))
    x = views()
    with pytest.raises(ValueError, match="no reference set"):
        VICReg()(np.arange(6), x, reference=Reference(np.arange(6), x))
    for kwargs, match in [({"eps": 0.0}, "eps"), ({"variance_mu": -1.0}, "variance_mu"),
                          ({"invariance_lambda": "a"}, "invariance_lambda")]:
        with pytest.raises(ValueError, match=match):
            VICReg(**kwargs)


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.requires("torch", "pytorch_metric_learning")
@pytest.mark.parametrize("n, d", [(2, 4), (8, 16), (64, 8)])
@pytest.mark.parametrize("normalised", [False, True])
def test_equals_pytorch_metric_learning(n, d, normalised):
    from pytorch_metric_learning import losses as pml

    x = views(n=n, d=d, seed=n)
    if normalised:
        x = np.concatenate([twin.unit_rows(x[:, :d]), twin.unit_rows(x[:, d:])], axis=1)
    expected, (dz, dz_prime) = twin.theirs(lambda z, z_: pml.VICRegLoss()(z, ref_emb=z_),
                                           x[:, :d], x[:, d:])
    value, gradient = twin.ours(VICReg(), np.arange(n), x)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    twin.assert_gradients_close(gradient, [np.concatenate([dz, dz_prime], axis=1)])
