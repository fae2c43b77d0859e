"""ProxyNCA (keras_dml/losses/proxy_nca.py): a single class. Its settings against the
NumPy loop, exact weights and eager / tf.function / XLA: tests/test_losses_cases.py;
the ProxyLoss base: test_losses_proxies.py."""

import numpy as np

import reference as ref
from keras_dml import weighting
from keras_dml.losses import ProxyNCA
from proxy_checks import with_proxies


def test_single_class_problem_matches_reference():
    loss = ProxyNCA(1, scale=2.0)
    labels, x = np.zeros(4, "int32"), np.random.default_rng(0).normal(size=(4, 8)).astype("f")
    proxies = with_proxies(loss)
    np.testing.assert_allclose(float(loss(labels, x)), ref.proxy_nca(x, labels, proxies, 2.0),
                               rtol=1e-5)
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)
