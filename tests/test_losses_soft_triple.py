"""SoftTriple (keras_dml/losses/soft_triple.py): the docstring's sample-to-centre weights
and the hyperparameters. Its settings against the NumPy loop, exact weights and eager /
tf.function / XLA: tests/test_losses_cases.py; the ProxyLoss base:
test_losses_proxies.py."""

import numpy as np
import pytest

import reference as ref
from keras_dml.losses import SoftTriple
from proxy_checks import CLASSES, batch, with_proxies


def test_weights_are_the_relaxed_softmax_formula():
    """dL_i/dS_i,ck = lambda (softmax_c - [c = y]) q_ck (1 + (S_i,ck - S'_ic) / gamma)."""
    la, gamma, margin, k = 10.0, 0.5, 0.1, 3
    loss = SoftTriple(CLASSES, centers_per_class=k, la=la, gamma=gamma, margin=margin)
    labels, x = batch(seed=7)
    s = ref.cosine_to(x, with_proxies(loss)).reshape(len(x), CLASSES, k)
    q = np.exp(s / gamma)
    q /= q.sum(axis=2, keepdims=True)
    relaxed = (q * s).sum(axis=2)
    own = np.eye(CLASSES)[labels]
    logits = la * (relaxed - margin * own)
    softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    expected = la * (softmax - own)[:, :, None] * q * (1 + (s - relaxed[:, :, None]) / gamma)
    # the engine's matrix is centre-major: column k C + c is centre k of class c
    centre_major = expected.transpose(0, 2, 1).reshape(len(x), -1)
    np.testing.assert_allclose(loss.terms(labels, x).weights, centre_major, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make, match", [
    (lambda: SoftTriple(CLASSES, la=0.0), "la"),
    (lambda: SoftTriple(CLASSES, gamma=-0.1), "gamma"),
    (lambda: SoftTriple(CLASSES, tau=-0.2), "tau"),
    (lambda: SoftTriple(CLASSES, centers_per_class=0), "centers_per_class"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
