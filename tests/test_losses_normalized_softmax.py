"""NormalizedSoftmax (keras_dml/losses/normalized_softmax.py): its weights are the
docstring's (softmax - [c = y]) / T. Its settings against the NumPy loop, exact weights
and eager / tf.function / XLA: tests/test_losses_cases.py; the ProxyLoss base:
test_losses_proxies.py."""

import numpy as np

import reference as ref
from keras_dml.losses import NormalizedSoftmax
from proxy_checks import CLASSES, batch, with_proxies


def test_weights_are_the_softmax_minus_the_label_over_the_temperature():
    loss = NormalizedSoftmax(CLASSES, temperature=0.1)
    labels, x = batch(seed=7)
    logits = ref.cosine_to(x, with_proxies(loss)) / 0.1
    softmax = np.exp(logits - logits.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    expected = (softmax - np.eye(CLASSES)[labels]) / 0.1
    np.testing.assert_allclose(loss.terms(labels, x).weights, expected, rtol=1e-5, atol=1e-5)
