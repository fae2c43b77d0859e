"""Batches and proxies shared by the proxy-loss tests: the ProxyLoss base
(test_losses_proxies), ProxyAnchor, ProxyNCA, NormalizedSoftmax and SoftTriple
(test_losses_<module>), their settings' generic checks (test_losses_cases) and the
Proxies layer (test_proxy_layers)."""

import numpy as np

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
