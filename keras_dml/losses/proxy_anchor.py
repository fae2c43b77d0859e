"""Proxy Anchor loss: proxies as anchors, weighted by the samples' relative hardness."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend.primitives import take_along_rows
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["ProxyAnchor"]


@register(example={"num_classes": 8}, reference="proxies", row_local=False)
class ProxyAnchor(ProxyLoss):
    """Proxy Anchor loss (Kim et al. CVPR 2020).

    With S(f_i, p) the cosine similarity of sample i to proxy p, B_p^+ / B_p^- the
    samples of / not of p's class, P^+ the proxies with at least one positive in
    the batch and P all C proxies (slides, "Details of Proxy Anchor Loss"):

        L = 1/|P^+| sum_{p in P^+} SoftPlus(LSE_{i in B_p^+} -alpha (S(f_i, p) - delta))
          + 1/|P|   sum_{p in P}   SoftPlus(LSE_{i in B_p^-}  alpha (S(f_i, p) + delta))

    where SoftPlus(LSE(x)) = log(1 + sum exp(x)). The negative term is normalised
    by all C proxies, as in the slides' second form and the authors' code. The
    loss is batch-global (one scalar per batch: a `sample_weight` only scales it
    by the weights' mean). Its gradient is the slides' hardness formula, exact:

        dL/dS(f_i, p) = -alpha/|P^+| h_p^+(f_i) / (1 + sum_{j in B_p^+} h_p^+(f_j)), i in B_p^+
        dL/dS(f_i, p) =  alpha/|P|   h_p^-(f_i) / (1 + sum_{k in B_p^-} h_p^-(f_k)), i in B_p^-

    with the positive / negative hardness h_p^+(f) = exp(-alpha (S(f, p) - delta))
    and h_p^-(f) = exp(alpha (S(f, p) + delta)). `keras_dml.weighting.pair_weights(
    loss, labels, embeddings)` returns these (N, C) sample-to-proxy weights (their
    absolute values), showing which samples dominate each proxy's pull and push.

    Args:
        num_classes: number of training classes C (one proxy each); labels must
            lie in [0, C).
        alpha: the scale. Defaults to 32.
        delta: the margin. Defaults to 0.1.
        proxy_lr_multiplier: proxies' learning rate relative to the optimizer's;
            the paper uses 100. Defaults to 1.0.
        proxy_initializer: defaults to kaiming-normal (the authors' code).

    Defaults are the paper's (alpha = 32, delta = 0.1, one proxy per class).

    Examples:

    >>> loss = keras_dml.losses.ProxyAnchor(num_classes=100, proxy_lr_multiplier=100)
    >>> model = keras_dml.models.DMLModel(inputs, embeddings)  # doctest: +SKIP
    >>> model.compile(optimizer=keras.optimizers.AdamW(1e-4), loss=loss)

    Reference:
        Kim, Kim, Cho, Kwak, "Proxy Anchor Loss for Deep Metric Learning", CVPR 2020.
    """

    config_keys = ProxyLoss.config_keys + ("alpha", "delta")

    def __init__(self, num_classes, alpha=32.0, delta=0.1, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size",
                 name="proxy_anchor", dtype=None):
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)
        self.alpha, self.delta = _hyper.positive("alpha", alpha), _hyper.finite("delta", delta)

    def compute_terms(self, matrix, pairs):
        labels = pairs.labels
        num_proxies = self.trainable_layer.num_proxies
        own_index = ops.own_entries(labels)
        # [positives] one own proxy per sample: an O(N) problem grouped by proxy
        own = take_along_rows(matrix, labels)
        pull_terms, pull_share = ops.grouped_softplus_lse(
            -self.alpha * (own - self.delta), labels, num_proxies
        )
        members = keras.ops.segment_sum(keras.ops.ones_like(own), labels, num_proxies)
        with_positive = keras.ops.sum(keras.ops.cast(members > 0, "float32"))
        # [negatives] per proxy, softplus of the column LSE without its own samples
        push = keras.ops.scatter_update(
            self.alpha * (matrix + self.delta), own_index,
            keras.ops.full_like(own, ops.FLOAT32_MIN),
        )
        shift = keras.ops.stop_gradient(keras.ops.maximum(keras.ops.max(push, axis=0), 0.0))
        exps = keras.ops.exp(push - shift)
        total = keras.ops.sum(exps, axis=0) + keras.ops.exp(-shift)
        push_terms = keras.ops.log(total) + shift
        # [loss] and [weighting]: the slides' hardness formula
        pull_scale = keras.ops.divide_no_nan(self.alpha, with_positive)
        value = (keras.ops.divide_no_nan(keras.ops.sum(pull_terms), with_positive)
                 + keras.ops.sum(push_terms) / float(num_proxies))
        weights = keras.ops.scatter_update(
            self.alpha / float(num_proxies) * (exps / total), own_index,
            -pull_scale * pull_share
        )
        return value, weights
