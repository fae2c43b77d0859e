"""Batches, proxies and checks shared by the proxy-loss test files: the ProxyLoss base
(test_losses_proxies), ProxyAnchor, ProxyNCA, NormalizedSoftmax and SoftTriple
(test_losses_<module>), and the Proxies layer (test_proxy_layers)."""

import numpy as np
import tensorflow as tf

import reference as ref
from keras_dml import weighting
from keras_dml.losses import NormalizedSoftmax, ProxyAnchor, ProxyNCA

CLASSES = 5


def batch(n=12, dim=8, classes=CLASSES, seed=0):
    rng = np.random.default_rng(seed)
    labels = (np.arange(n) % classes).astype("int32")
    return labels, rng.normal(size=(n, dim)).astype("float32")


def with_proxies(loss, dim=8, seed=1):
    """Build the loss's proxies and set them to known random values."""
    loss.trainable_layer.build((None, dim))
    shape = loss.proxies.shape
    values = np.random.default_rng(seed).normal(size=shape).astype("float32")
    loss.proxies.assign(values)
    return values


def reference_value(loss, labels, x, proxies):
    if isinstance(loss, ProxyAnchor):
        return ref.proxy_anchor(x, labels, proxies, loss.alpha, loss.delta)[0]
    if isinstance(loss, ProxyNCA):
        return ref.proxy_nca(x, labels, proxies, loss.scale)
    if isinstance(loss, NormalizedSoftmax):
        return ref.normalized_softmax(x, labels, proxies, loss.temperature)
    return ref.soft_triple(x, labels, proxies, loss.proxies_per_class, loss.la, loss.gamma,
                           loss.tau, loss.margin)


def assert_matches_numpy_reference_and_autodiff(make):
    loss = make()
    labels, x = batch(seed=3)
    proxies = with_proxies(loss)
    np.testing.assert_allclose(float(loss(labels, x)), reference_value(loss, labels, x, proxies),
                               rtol=1e-5, atol=1e-5)
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=2e-6)


def assert_eager_function_and_xla_agree(cls):
    loss = cls(CLASSES)
    labels, x = batch(seed=6)
    with_proxies(loss)
    eager = float(loss(labels, x))
    graph = float(tf.function(loss)(labels, x))
    xla = float(tf.function(loss, jit_compile=True)(labels, x))
    np.testing.assert_allclose([graph, xla], [eager, eager], rtol=1e-5)
