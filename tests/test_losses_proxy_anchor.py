"""ProxyAnchor (keras_dml/losses/proxy_anchor.py): the slides' hardness formula. Its
settings against the NumPy loop, exact weights and eager / tf.function / XLA:
tests/test_losses_cases.py; the ProxyLoss base: test_losses_proxies.py."""

import numpy as np
import pytest

import reference as ref
from keras_dml import weighting
from keras_dml.losses import ProxyAnchor
from proxy_checks import CLASSES, batch, with_proxies


@pytest.mark.parametrize("alpha, delta", [(32.0, 0.1), (8.0, 0.3)])
def test_proxy_anchor_gradient_is_the_slides_hardness_formula(alpha, delta):
    loss = ProxyAnchor(CLASSES, alpha=alpha, delta=delta)
    labels, x = batch(n=9, seed=4)
    labels[labels == 4] = 0  # class 4 has no positive in the batch: |P+| = 4
    proxies = with_proxies(loss)
    _, slides = ref.proxy_anchor(x, labels, proxies, alpha, delta)
    terms = loss.terms(labels, x)
    np.testing.assert_allclose(terms.weights, slides, rtol=1e-5, atol=1e-7)
    # pair_weights: the hardness weights as non-negative (N, C) sample-to-proxy weights.
    weights = weighting.pair_weights(loss, labels, x)
    assert weights.shape == (9, CLASSES)
    np.testing.assert_allclose(weights, np.abs(slides), rtol=1e-5, atol=1e-7)
    own = np.eye(CLASSES, dtype=bool)[labels]
    np.testing.assert_array_equal(np.asarray(terms.positive), own)
