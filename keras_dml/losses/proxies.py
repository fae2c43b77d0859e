"""`ProxyLoss`: the pair-weighting engine with learnable proxies as the key set.

A proxy loss is the same picture as every pair loss, with the key set replaced by
learnable proxies: the matrix is samples x proxies (N, C K), never anything larger,
a sample's positive keys are its own class's proxies, and its negative keys all the
other proxies. The proxies live in a `keras_dml.proxy_layers.Proxies` layer exposed
as `loss.trainable_layer` (see the engine contract): `DMLModel` attaches it to the
model so the proxies are trained and saved with the model.

`keras_dml.weighting.pair_weights(loss, labels, embeddings)` works on every proxy
loss and returns the (N, C K) sample-to-proxy weights.
"""

import numpy as np
import tensorflow as tf

from keras_dml import ops, validation
from keras_dml.losses.base import PairLoss
from keras_dml.proxy_layers import Proxies
from keras_dml.weighting import weighted_pair_loss


def check_label_range(labels, num_classes, name="labels"):
    """Check 0 <= labels < num_classes.

    Eager: a ValueError naming the offending values. In a tf.function: a
    `tf.errors.InvalidArgumentError` at run time. XLA drops run-time assertions, so
    under `jit_compile=True` the caller turns the loss into NaN instead (see
    `ProxyLoss.call`) rather than silently matching a wrong proxy.
    """
    if tf.executing_eagerly():
        values = labels.numpy()
        bad = values[(values < 0) | (values >= num_classes)]
        if bad.size:
            raise ValueError(
                f"{name} must lie in [0, num_classes) = [0, {num_classes}), got "
                f"{bad.size} out-of-range values such as {np.unique(bad)[:5].tolist()}."
            )
        return labels
    message = f"{name} must lie in [0, num_classes) = [0, {num_classes})"
    with tf.control_dependencies([
        tf.debugging.assert_non_negative(labels, message=message),
        tf.debugging.assert_less(labels, num_classes, message=message),
    ]):
        return tf.identity(labels)


class ProxyLoss(PairLoss):
    """Base class of losses on a samples x proxies similarity matrix.

    A subclass writes `compute_terms(matrix, positive, negative)` as for any
    `PairLoss`, where `matrix` is (N, C K) and `positive[i, c K + k]` is True exactly
    when sample i has label c; it may add a proxy-only term (a regulariser) by
    overriding `proxy_penalty(proxies)`.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        proxies_per_class: proxies per class K. Defaults to 1.
        proxy_lr_multiplier: learning rate of the proxies relative to the
            optimizer's, for any Keras optimizer whose step is proportional to its
            learning rate (see `keras_dml.proxy_layers`). Defaults to 1.0.
        proxy_initializer: initializer of the proxies. Defaults to kaiming-normal,
            as in the Proxy Anchor code.
        metric: sample-to-proxy similarity. Defaults to "cosine".
        reduction, name, dtype: as for `keras.losses.Loss`.

    Labels outside [0, C) raise a ValueError in eager mode and an
    InvalidArgumentError in a tf.function; under XLA (`jit_compile=True`), which
    cannot raise at run time, the loss of such a batch is NaN.
    """

    def __init__(self, num_classes, proxies_per_class=1, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, metric="cosine", reduction="sum_over_batch_size",
                 name=None, dtype=None):
        super().__init__(metric=metric, miner=None, reduction=reduction, name=name,
                         dtype=dtype)
        self.trainable_layer = Proxies(
            num_classes,
            proxies_per_class=proxies_per_class,
            learning_rate_multiplier=proxy_lr_multiplier,
            initializer=proxy_initializer,
            name=f"{self.name}_proxies",
        )

    # -- the proxies ------------------------------------------------------------------
    @property
    def num_classes(self):
        return self.trainable_layer.num_classes

    @property
    def proxies_per_class(self):
        return self.trainable_layer.proxies_per_class

    @property
    def proxies(self):
        """The proxies variable (C K, d), or None before the first call."""
        return self.trainable_layer.proxies

    def proxy_penalty(self, proxies):
        """A term depending on the proxies only, added to every sample's value."""
        return tf.constant(0.0)

    # -- the engine hooks -------------------------------------------------------------
    def validate(self, labels, embeddings):
        labels, embeddings = validation.check_labels_and_embeddings(labels, embeddings)
        return check_label_range(labels, self.num_classes), embeddings

    def pair_matrix(self, embeddings):
        embeddings = ops.to_float32(embeddings)
        proxies = self.trainable_layer(embeddings)
        return ops.pairwise(embeddings, proxies, metric=self.metric)

    def pair_masks(self, matrix, labels):
        proxy_class = tf.range(self.trainable_layer.num_proxies) // self.proxies_per_class
        positive = tf.equal(labels[:, tf.newaxis], proxy_class[tf.newaxis, :])
        return positive, tf.logical_not(positive)

    def call(self, y_true, y_pred):
        labels = validation.check_class_labels(y_true)
        labels = check_label_range(labels, self.num_classes)
        matrix = self.pair_matrix(y_pred)
        positive, negative = self.pair_masks(matrix, labels)
        value = weighted_pair_loss(matrix, lambda m: self.compute_terms(m, positive, negative))
        value += self.proxy_penalty(self.trainable_layer.proxies)
        in_range = tf.reduce_all((labels >= 0) & (labels < self.num_classes))
        return tf.where(in_range, value, tf.fill(tf.shape(value), np.float32("nan")))

    def get_config(self):
        config = super().get_config()
        for key in ("metric", "miner"):
            config.pop(key)
        layer = self.trainable_layer
        config.update(
            num_classes=layer.num_classes,
            proxy_lr_multiplier=layer.learning_rate_multiplier,
            proxy_initializer=layer.get_config()["initializer"],
        )
        return config

