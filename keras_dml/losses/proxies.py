"""`ProxyLoss`: the pair-weighting engine with learnable proxies as the key set."""

import keras
import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss, Reference
from keras_dml.layers.proxies import Proxies

__all__ = ["ProxyLoss", "centre_major"]


def centre_major(proxies, num_classes, proxies_per_class):
    """(C K, d) proxies stored class-major (row c K + k) as (K C, d) centre-major rows
    (row k C + c), the order of the engine's matrix columns: a per-class reduction over
    the K proxies then runs over the middle axis of an (N, K, C) view of the matrix,
    where TensorFlow is fast (no transpose of the matrix, forward or backward)."""
    if proxies_per_class == 1:
        return proxies
    by_class = keras.ops.reshape(proxies, (num_classes, proxies_per_class, -1))
    return keras.ops.reshape(keras.ops.transpose(by_class, (1, 0, 2)),
                             (num_classes * proxies_per_class, -1))


def _initializer(identifier):
    """A Keras initializer from `identifier` (None: the layer's default)."""
    try:
        return keras.initializers.get(identifier)
    except ValueError as error:
        raise ValueError(f"proxy_initializer must be a Keras initializer or its name, got "
                         f"{identifier!r} ({error}).") from None


class ProxyLoss(PairLoss):
    """Base class of losses on a samples x proxies similarity matrix.

    The reference set is the proxies, with their class ids: proxy k of class c is
    column k C + c of the (N, C K) matrix (centre-major; `loss.proxies` stores it
    as row c K + k), and the gradient reaches the proxies. A
    sample's positive keys are its own class's proxies, its negative keys all the
    others (`keras_dml.weighting.pair_weights` gives the (N, C K) weights). A
    subclass writes `compute_terms(matrix, pairs)` and reads the class labels from
    `pairs.labels` (gathers and sparse updates: no (N, C K) mask in training). A
    proxy-only term (a regulariser) goes in `proxy_penalty(proxies)`.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        proxies_per_class: proxies per class K. Defaults to 1.
        proxy_lr_multiplier: learning rate of the proxies relative to the
            optimizer's, for any Keras optimizer whose step is proportional to its
            learning rate (see `keras_dml.layers.proxies`). Defaults to 1.0.
        proxy_initializer: initializer of the proxies. Defaults to kaiming-normal,
            as in the Proxy Anchor code.
        metric: sample-to-proxy similarity. Defaults to "cosine".
        reduction, name, dtype: as for `keras.losses.Loss`.

    The proxies are a `keras_dml.layers.Proxies` layer, `loss.trainable_layer`,
    which `DMLModel` attaches to the model at `compile`: they are trained and saved
    with it. A plain `keras.Model` does not train them (the loss then learns against
    fixed random proxies); a custom training loop adds
    `loss.trainable_layer.trainable_weights` to the variables the optimizer updates.

    Labels outside [0, C) raise a ValueError in eager mode and an
    InvalidArgumentError in a tf.function; under XLA (`jit_compile=True`) and in a
    jitted JAX step, which cannot raise at run time, the loss of such a batch is NaN.
    """

    config_keys = ("num_classes",)
    reads_pair_masks = False

    def __init__(self, num_classes, proxies_per_class=1, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, *, metric="cosine",
                 reduction="sum_over_batch_size", name=None, dtype=None):
        super().__init__(metric=metric, miner=None, reduction=reduction, name=name,
                         dtype=dtype)
        self.trainable_layer = Proxies(
            num_classes,
            proxies_per_class=proxies_per_class,
            learning_rate_multiplier=hyperparameters.positive("proxy_lr_multiplier",
                                                              proxy_lr_multiplier),
            initializer=_initializer(proxy_initializer),
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
        """A term depending on the proxies only, added to every sample's value, or None."""
        return None

    # -- the engine hooks -------------------------------------------------------------
    def default_reference(self, labels, embeddings):
        """The proxies, centre-major (`centre_major`): column k C + c is proxy k of class c."""
        keys = centre_major(self.trainable_layer(embeddings), self.num_classes,
                            self.proxies_per_class)
        return Reference(keras.ops.convert_to_tensor(self._key_classes()), keys, trainable=True)

    def _key_classes(self):
        """int32 class ids of the keys, centre-major: key k C + c is of class c."""
        return np.arange(self.trainable_layer.num_proxies, dtype=np.int32) % self.num_classes

    def check(self, labels, embeddings):
        labels, embeddings = super().check(labels, embeddings)
        return validation.check_label_range(labels, self.num_classes), embeddings

    def check_reference(self, reference, embeddings):
        """A given key set must be laid out as `default_reference`'s: C K keys, key
        k C + c of class c (the terms read the layout, not the key labels)."""
        reference = super().check_reference(reference, embeddings)
        layout = self._key_classes()
        message = (f"{type(self).__name__}: reference labels must be the proxies' "
                   f"centre-major class ids, arange({layout.size}) % {self.num_classes} "
                   f"(key k C + c is proxy k of class c; `keras_dml.losses.proxies."
                   f"centre_major` lays (C K, d) proxies out so)")
        labels = reference.labels
        if labels.shape[0] is not None and labels.shape[0] != layout.size:
            raise ValueError(f"{message}; got {labels.shape[0]} keys.")
        labels, keys = primitives.assert_equal(labels, layout, message, reference.embeddings)
        return reference._replace(labels=labels, embeddings=keys)

    def penalty(self, labels, embeddings):
        penalty = self.proxy_penalty(self.trainable_layer.proxies)
        # XLA and JAX's jit drop the label range check: such a batch's loss is NaN,
        # never a wrong proxy.
        in_range = keras.ops.all(keras.ops.logical_and(labels >= 0, labels < self.num_classes))
        return keras.ops.where(in_range, 0.0 if penalty is None else penalty, np.float32("nan"))

    def get_config(self):
        layer = self.trainable_layer
        return {**super().get_config(), "proxy_lr_multiplier": layer.learning_rate_multiplier,
                "proxy_initializer": layer.get_config()["initializer"]}

