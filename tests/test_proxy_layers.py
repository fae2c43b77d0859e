"""The Proxies layer (keras_dml.layers.proxies): Kaiming initialisation, checks, and the
learning-rate multiplier under several optimizers."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.losses import ProxyAnchor
from keras_dml.layers.proxies import Proxies
from proxy_checks import CLASSES, batch, with_proxies


def test_layer_is_built_from_the_embedding_size_with_kaiming_normal():
    layer = Proxies(2000)
    out = layer(tf.zeros((3, 64)))
    assert out.shape == (2000, 64) and layer.proxies.trainable
    std = float(np.std(layer.proxies.numpy()))
    assert abs(std - np.sqrt(2.0 / 2000)) < 0.01 * np.sqrt(2.0 / 2000)  # 5 standard errors
    with pytest.raises(ValueError, match="size 32 do not match.*64"):
        layer(tf.zeros((3, 32)))
    clone = Proxies.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize("bad", [dict(num_classes=0), dict(num_classes=2.5),
                                 dict(num_classes=3, learning_rate_multiplier=0.0)])
def test_layer_rejects_bad_arguments(bad):
    with pytest.raises(ValueError):
        Proxies(**bad)


def proxy_step(multiplier, optimizer):
    """Proxies' change after one optimizer step on a fixed batch."""
    labels, x = batch(seed=8)
    loss = ProxyAnchor(CLASSES, proxy_lr_multiplier=multiplier)
    before = with_proxies(loss)
    with tf.GradientTape() as tape:
        value = loss(labels, x)
    grads = tape.gradient(value, [loss.proxies])
    optimizer.apply(grads, [loss.proxies])
    return loss.proxies.numpy() - before


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras.optimizers.SGD(0.01),
    lambda: keras.optimizers.SGD(0.01, momentum=0.9),
    lambda: keras.optimizers.Adam(1e-4),
    lambda: keras.optimizers.AdamW(1e-4, weight_decay=0.01),
])
def test_learning_rate_multiplier_scales_the_proxy_step(make_optimizer):
    base = proxy_step(1.0, make_optimizer())
    scaled = proxy_step(10.0, make_optimizer())
    assert np.abs(base).max() > 0
    np.testing.assert_allclose(scaled, 10.0 * base, rtol=1e-4, atol=1e-9)
