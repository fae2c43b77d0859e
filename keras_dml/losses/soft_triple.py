"""SoftTriple loss: a softmax over classes, each represented by K learned centres."""

import keras
import numpy as np

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["SoftTriple"]


@register(example={"num_classes": 8, "centers_per_class": 2}, reference="proxies")
class SoftTriple(ProxyLoss):
    """SoftTriple loss (Qian et al. ICCV 2019), with its centre regulariser.

    Each class c has K centres w_c^k (the proxies). On cosine similarities
    S_i,ck = S(f_i, w_c^k), the relaxed similarity of sample i to class c is

        S'_ic = sum_k softmax_k(S_i,ck / gamma) S_i,ck

    and, with margin delta, scale lambda and the centre regulariser,

        L_i = -log( exp(lambda (S'_iy - delta))
                    / (exp(lambda (S'_iy - delta)) + sum_{c != y} exp(lambda S'_ic)) )
        R   = sum_c sum_{k < k'} sqrt(2 + 1e-5 - 2 <w_c^k, w_c^k'>) / (C K (K - 1))
        L   = mean_i L_i + tau R

    (R as in the authors' code, on unit-normalised centres; it is skipped when
    K = 1 or tau = 0). The sample-to-centre weights are the exact derivatives of
    L_i with respect to S_i,ck:

        dL_i/dS_i,ck = lambda (softmax_c - [c = y]) * q_ck (1 + (S_i,ck - S'_ic) / gamma)

    with q_ck = softmax_k(S_i,ck / gamma). The matrix is (N, K C), centre-major
    (column k C + c; `loss.proxies` stores centre k of class c as row c K + k).

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        centers_per_class: K. Defaults to 10.
        la: lambda, the scale. Defaults to 20.
        gamma: the entropy temperature of the centre softmax. Defaults to 0.1.
        tau: weight of the centre regulariser. Defaults to 0.2.
        margin: delta. Defaults to 0.01.
        proxy_lr_multiplier: centres' learning rate relative to the optimizer's.
            Defaults to 1.0.
        proxy_initializer: defaults to kaiming-normal.

    Defaults are the paper's (K = 10, lambda = 20, gamma = 0.1, tau = 0.2,
    delta = 0.01).

    Examples:

    >>> loss = keras_dml.losses.SoftTriple(num_classes=100)

    Reference:
        Qian, Shang, Sun, Hu, Li, Jin, "SoftTriple Loss: Deep Metric Learning
        Without Triplet Sampling", ICCV 2019.
    """

    config_keys = ProxyLoss.config_keys + ("centers_per_class", "la", "gamma", "tau", "margin")

    def __init__(self, num_classes, centers_per_class=10, la=20.0, gamma=0.1, tau=0.2,
                 margin=0.01, proxy_lr_multiplier=1.0, proxy_initializer=None,
                 reduction="sum_over_batch_size", name="soft_triple", dtype=None):
        super().__init__(num_classes, proxies_per_class=_hyper.integer_at_least(
                             "centers_per_class", centers_per_class, 1),
                         proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)
        self.la, self.gamma = _hyper.positive("la", la), _hyper.positive("gamma", gamma)
        self.tau, self.margin = _hyper.non_negative("tau", tau), _hyper.finite("margin", margin)

    @property
    def centers_per_class(self):
        return self.proxies_per_class

    def compute_terms(self, matrix, pairs):
        labels = pairs.labels
        classes, k = self.num_classes, self.proxies_per_class
        # (N, K, C): the matrix is centre-major (ProxyLoss), K on the middle axis; the
        # softmax over it written out (tf.nn.softmax would transpose a non-last axis)
        scaled = keras.ops.reshape(matrix, (-1, k, classes)) / self.gamma
        exp = keras.ops.exp(scaled - keras.ops.max(scaled, axis=1, keepdims=True))
        q = exp / keras.ops.sum(exp, axis=1, keepdims=True)
        relaxed = self.gamma * keras.ops.sum(q * scaled, axis=1)
        logits = self.la * (relaxed - self.margin * keras.ops.one_hot(labels, classes))
        value, d_logits = ops.softmax_cross_entropy(logits, labels)
        d_relaxed = self.la * d_logits
        # d relaxed_c / d S_ck = q_ck (1 + (S_ck - relaxed_c) / gamma)
        d_centres = q * (scaled + (1.0 - relaxed / self.gamma)[:, None, :])
        weights = keras.ops.reshape(d_relaxed[:, None, :] * d_centres, keras.ops.shape(matrix))
        return value, weights

    def proxy_penalty(self, proxies):
        k = self.proxies_per_class
        if self.tau == 0 or k == 1:
            return keras.ops.convert_to_tensor(0.0)
        # Per-class Gram of the raw centres, normalised on the (C, K, K) result: no
        # normalised (C K, d) copy of the centres and no pass over it backwards.
        centres = keras.ops.reshape(ops.to_float32(proxies), (self.num_classes, k, -1))
        inverse, _ = ops.inverse_norms(centres, axis=2)
        gram = (keras.ops.einsum("cid,cjd->cij", centres, centres)
                * inverse[:, :, None] * inverse[:, None, :])
        upper = keras.ops.convert_to_tensor(np.triu(np.ones((k, k), "float32"), 1))
        distances = keras.ops.sqrt(keras.ops.maximum(2.0 + 1e-5 - 2.0 * gram, 0.0))
        total = keras.ops.sum(distances * upper)
        return self.tau * total / (self.num_classes * k * (k - 1))
