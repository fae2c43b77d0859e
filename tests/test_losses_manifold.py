"""Manifold (keras_dml/losses/manifold.py): the paper's random walk and ranking terms as
a NumPy loop, exact weights, the gradients of the samples and the proxies against
finite differences of the loop, and pytorch-metric-learning 2.9's ManifoldLoss given
the classes as meta-classes. Modes, precision, serialization and degenerate batches:
tests/test_losses_contract.py."""

import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import pml_twin_checks as twin
import reference_pml_twins as twins_ref
from keras_dml.losses import Manifold, Reference
from proxy_checks import with_proxies

SETTINGS = [{}, {"lambda_c": 0.0}, {"lambda_c": 2.0, "alpha": 0.5, "margin": 0.05}]


def _loss_with_proxies(classes=6, dim=8, **settings):
    loss = Manifold(classes, **settings)
    return loss, with_proxies(loss, dim=dim)


@pytest.mark.parametrize("settings", SETTINGS)
def test_value_is_the_papers_and_weights_are_exact(settings):
    labels = np.array([0, 0, 0, 1, 1, 2, 2, 2, 3, 5], "int32")  # no sample of class 4
    x = np.random.default_rng(2).normal(size=(len(labels), 8)).astype("float32")
    loss, proxies = _loss_with_proxies(**settings)
    np.testing.assert_allclose(float(loss(labels, x)),
                               twins_ref.manifold_loop(x, labels, proxies, **settings),
                               rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def _finite_differences(f, values, entries, step=1e-5):
    out = []
    for index in entries:
        up, down = values.copy(), values.copy()
        up[index] += step
        down[index] -= step
        out.append((f(up) - f(down)) / (2 * step))
    return np.array(out)


def test_gradients_of_samples_and_proxies_are_the_loops_derivatives():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=4)
    loss, proxies = _loss_with_proxies(classes=3, dim=5, margin=0.1)
    embeddings = tf.Variable(x)
    with tf.GradientTape() as tape:
        value = loss(labels, embeddings)
    to_x, to_proxies = tape.gradient(value, [embeddings, loss.proxies])
    x64, p64 = x.astype("float64"), proxies.astype("float64")
    entries = [(i, j) for i in range(len(x)) for j in range(5)][::3]
    expected = _finite_differences(lambda v: twins_ref.manifold_loop(v, labels, p64, margin=0.1),
                                   x64, entries)
    np.testing.assert_allclose([to_x.numpy()[e] for e in entries], expected, rtol=1e-3,
                               atol=1e-6)
    entries = [(i, j) for i in range(3) for j in range(5)]
    expected = _finite_differences(lambda p: twins_ref.manifold_loop(x64, labels, p, margin=0.1),
                                   p64, entries)
    np.testing.assert_allclose([to_proxies.numpy()[e] for e in entries], expected, rtol=1e-3,
                               atol=1e-6)


def test_an_explicit_reference_set_is_refused():
    labels, x = checks.batch(classes=3, k=2, dim=8)
    with pytest.raises(ValueError, match="no explicit reference set"):
        Manifold(3)(labels, x, reference=Reference(labels, x))


def test_labels_beyond_the_proxies_are_refused():
    labels, x = checks.batch(classes=3, k=2, dim=8)
    with pytest.raises(ValueError, match=r"num_classes\) = \[0, 2\).*\[2\]"):
        Manifold(2)(labels, x)


@pytest.mark.parametrize("make, match", [
    (lambda: Manifold(4, alpha=1.0), "alpha"), (lambda: Manifold(4, alpha=0), "alpha"),
    (lambda: Manifold(4, lambda_c=-1), "lambda_c"),
    (lambda: Manifold(4, margin=float("nan")), "margin"),
    (lambda: Manifold(0), "num_classes"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@twin.against_pml
@pytest.mark.parametrize("settings", SETTINGS[::2])
def test_equals_pytorch_metric_learning(classes, k, normalised, settings):
    """PML's ManifoldLoss takes no labels: the classes are passed as its meta-classes
    (`indices_tuple`); its proxies are set to this loss's. Cosine is its only metric."""
    import torch
    from pytorch_metric_learning import losses as pml

    labels, x = twin.compared_batch(classes, k, normalised)
    loss, proxies = _loss_with_proxies(classes + 2, dim=x.shape[1], **settings)
    renamed = {"lambda_c": "lambdaC"}
    peer = pml.ManifoldLoss(l=x.shape[1], K=classes + 2,
                            **{renamed.get(key, key): v for key, v in settings.items()})
    peer = peer.double()
    peer.proxies.data = torch.tensor(proxies, dtype=torch.float64)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected = peer(xt, indices_tuple=torch.tensor(labels, dtype=torch.long))
    expected.backward()
    embeddings = tf.Variable(x)
    with tf.GradientTape() as tape:
        value = loss(labels, embeddings)
    to_x, to_proxies = tape.gradient(value, [embeddings, loss.proxies])
    np.testing.assert_allclose(float(value), float(expected.detach()), rtol=1e-5)
    for ours, theirs in [(to_x, xt.grad), (to_proxies, peer.proxies.grad)]:
        scale = np.abs(theirs.numpy()).max()
        np.testing.assert_allclose(ours.numpy() / scale, theirs.numpy() / scale, atol=1e-5)
