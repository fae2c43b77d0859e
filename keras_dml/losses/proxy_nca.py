"""Proxy NCA loss: NCA of each sample against one learnable proxy per class."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend.primitives import take_along_rows
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["ProxyNCA"]


@register(example={"num_classes": 8}, reference="proxies")
class ProxyNCA(ProxyLoss):
    """Proxy NCA loss (Movshovitz-Attias et al. ICCV 2017).

    On L2-normalised embeddings f_i and proxies p, with D the squared Euclidean
    distance, p^+ the proxy of sample i's class and P^- the other proxies (slides,
    "Proxy NCA loss"), scaled by `scale` s:

        L_i = -log( exp(-s D(f_i, p^+)) / sum_{p in P^-} exp(-s D(f_i, p)) )
            = s D(f_i, p^+) + log sum_{p in P^-} exp(-s D(f_i, p))

    and the batch loss is the mean over samples. As in the paper the positive
    proxy is not in the denominator, so L_i may be negative. The loss is computed
    on the cosine similarity S, using D = 2 - 2 S for unit vectors:
    L_i = LSE_{p in P^-}(2 s S(f_i, p)) - 2 s S(f_i, p^+). Its sample-to-proxy
    weights are the exact derivatives: dL_i/dS(f_i, p^+) = -2 s and
    dL_i/dS(f_i, p) = 2 s softmax_{P^-}(2 s S(f_i, .))_p on negatives.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        scale: s, the inverse softmax temperature on squared distances. Defaults to
            1.0, the paper's formula (also pytorch-metric-learning's default);
            Proxy-NCA++ (Teh et al. 2020) reports better results with s = 9.
        proxy_lr_multiplier: proxies' learning rate relative to the optimizer's.
            Defaults to 1.0.
        proxy_initializer: defaults to kaiming-normal.

    Examples:

    >>> loss = keras_dml.losses.ProxyNCA(num_classes=100, scale=9.0)

    Reference:
        Movshovitz-Attias, Toshev, Leung, Ioffe, Singh, "No Fuss Distance Metric
        Learning using Proxies", ICCV 2017.
    """

    config_keys = ProxyLoss.config_keys + ("scale",)

    def __init__(self, num_classes, scale=1.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size", name="proxy_nca",
                 dtype=None):
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)
        self.scale = _hyper.positive("scale", scale)

    def compute_terms(self, matrix, pairs):
        labels = pairs.labels
        logits = 2.0 * self.scale * matrix
        own_index = ops.own_entries(labels)
        own = take_along_rows(logits, labels)
        if self.num_classes == 1:  # no negative proxy: L_i = s D(f_i, p^+)
            return 2.0 * self.scale - own, keras.ops.scatter_update(
                keras.ops.zeros_like(matrix), own_index,
                keras.ops.full_like(own, -2.0 * self.scale))
        # [negatives] the softmax over all proxies but the sample's own
        others = keras.ops.scatter_update(logits, own_index,
                                          keras.ops.full_like(own, ops.FLOAT32_MIN))
        value = keras.ops.logsumexp(others, axis=1) - own
        weights = keras.ops.scatter_update(keras.ops.softmax(others, axis=-1), own_index,
                                           -keras.ops.ones_like(own))
        return value, 2.0 * self.scale * weights
