"""Supervised contrastive (SupCon) and NT-Xent / InfoNCE losses."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["NTXent", "SupervisedContrastive"]


def supcon_terms(logits, positive, negative):
    """Per-anchor SupCon value on logits z = s / tau and d value / d z.

        L_i = -1/|P_i| sum_{p in P_i} log( e^{z_ip} / sum_{k in P_i u N_i} e^{z_ik} )
            = LSE_{P_i u N_i}(z_i) - mean_{p in P_i} z_ip

        dL_i/dz_ij = softmax_{P_i u N_i}(z_i)_j - [j in P_i] / |P_i|

    Anchors without a positive give 0.
    """
    count = keras.ops.sum(keras.ops.cast(positive, "float32"), axis=1, keepdims=True)
    has_positive = count > 0
    pool_lse, pool_softmax, _ = ops.masked_softmax_parts(
        logits, keras.ops.logical_or(positive, negative), rows=has_positive)
    share = keras.ops.where(positive, 1.0 / keras.ops.maximum(count, 1.0), 0.0)
    mean_positive = keras.ops.sum(share * logits, axis=1)
    return pool_lse - mean_positive, pool_softmax - share


def ntxent_terms(logits, positive, negative):
    """Per-anchor NT-Xent value on logits z = s / tau and d value / d z.

    Each positive pair (i, p) is its own softmax against i's negatives:

        l_ip = -log( e^{z_ip} / (e^{z_ip} + sum_{n in N_i} e^{z_in}) )
        L_i  = 1/|P_i| sum_{p in P_i} l_ip

        dL_i/dz_ip = (q_ip - 1) / |P_i|,          q_ip = e^{z_ip - D_ip}
        dL_i/dz_in = softmax_{N_i}(z_i)_n sum_{p in P_i} e^{LSE_{N_i} - D_ip} / |P_i|

    with D_ip = log(e^{z_ip} + sum_{n in N_i} e^{z_in}). Anchors without a positive
    give 0.
    """
    count = keras.ops.sum(keras.ops.cast(positive, "float32"), axis=1, keepdims=True)
    negative_lse, negative_softmax, has_negative = ops.masked_softmax_parts(logits, negative)
    negative_lse = keras.ops.where(has_negative, negative_lse[:, None], ops.FLOAT32_MIN)
    pair_lse = ops.logaddexp(logits, negative_lse)  # D_ip, (N, M)
    share = keras.ops.where(positive, 1.0 / keras.ops.maximum(count, 1.0), 0.0)
    value = keras.ops.sum(share * (pair_lse - logits), axis=1)
    positive_weights = share * (keras.ops.exp(keras.ops.minimum(logits - pair_lse, 0.0)) - 1.0)
    spill = keras.ops.sum(share * keras.ops.exp(keras.ops.minimum(negative_lse - pair_lse, 0.0)),
                          axis=1, keepdims=True)
    # an anchor without negatives has nothing to contrast: exactly 0 (under XLA, whose
    # exp and log round, D_ip - z_ip would come out near 1e-8 instead)
    value = keras.ops.where(has_negative[:, 0], value, 0.0)
    positive_weights = keras.ops.where(has_negative, positive_weights, 0.0)
    return value, positive_weights + negative_softmax * spill


class _TemperatureLoss(PairLoss):
    """A loss on in-batch cosines divided by a temperature (not for direct use)."""

    logit_terms = None  # (logits, positive, negative) -> (value, d value / d logits)

    def __init__(self, temperature, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name=None, dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.temperature = _hyper.positive("temperature", temperature)

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        sign = -1.0 if self.is_distance else 1.0
        logits = sign * matrix / self.temperature
        value, weights = type(self).logit_terms(logits, positive, negative)
        return value, weights * (sign / self.temperature)

    def get_config(self):
        config = super().get_config()
        config.update(temperature=self.temperature)
        return config


@register()
class SupervisedContrastive(_TemperatureLoss):
    """Supervised contrastive loss, L^sup_out (Khosla et al. NeurIPS 2020, eq. 2).

        L = 1/N sum_i -1/|P(i)| sum_{p in P(i)} log( exp(z_i . z_p / tau)
                                                     / sum_{a in A(i)} exp(z_i . z_a / tau) )

    with z the L2-normalised embeddings, P(i) the other samples of i's class and
    A(i) all samples but i. The gradient is exact: softmax_A - 1/|P| on positives,
    over tau. Anchors without a positive contribute 0 (pytorch-metric-learning's
    `SupConLoss` averages over the others: the same on batches where every sample
    has a positive). With two augmented views of every image, labels the classes,
    this is the paper's setting; with labels the instance ids it is SimCLR's
    NT-Xent up to whether positives sit in the denominator.

    Args:
        temperature: tau. Defaults to 0.1 (the paper's, and PML's).
        metric: defaults to "cosine"; a distance uses -d / tau as the logit.
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.SupervisedContrastive(temperature=0.1)

    Reference:
        Khosla et al., "Supervised Contrastive Learning", NeurIPS 2020.
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    logit_terms = staticmethod(supcon_terms)

    def __init__(self, temperature=0.1, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="supervised_contrastive", dtype=None):
        super().__init__(temperature, metric=metric, miner=miner, reduction=reduction,
                         name=name, dtype=dtype)


@register()
class NTXent(_TemperatureLoss):
    """NT-Xent / InfoNCE (Chen et al. ICML 2020, SimCLR eq. 1; Oord et al. 2018).

    Labels are instance ids: the positives of sample i are the other views of the
    same instance, its negatives every sample of another instance. Each positive
    pair is a softmax against the anchor's negatives:

        l_ip = -log( exp(s_ip / tau) / (exp(s_ip / tau) + sum_{n in N_i} exp(s_in / tau)) )

    and L_i is the mean of l_ip over i's positives; the batch loss is the mean over
    anchors, which equals SimCLR's mean over all 2N ordered positive pairs with
    two views per instance (and pytorch-metric-learning's `NTXentLoss`, a mean
    over positive pairs, whenever every instance has the same number of views).
    Other positives never enter a pair's denominator. The gradient is exact.
    Anchors without a positive contribute 0.

    Args:
        temperature: tau. Defaults to 0.07 (pytorch-metric-learning's default;
            SimCLR used 0.1 - 0.5, MoCo 0.07).
        metric: defaults to "cosine".
        miner: optional `keras_dml.mining.Miner`.

    Two views per instance come from `keras_dml.data.two_view_batches`.

    Examples:

    >>> batches = keras_dml.data.two_view_batches(images, augment,  # doctest: +SKIP
    ...                                           instances_per_batch=256)
    >>> model.compile(optimizer="adam", loss=keras_dml.losses.NTXent(temperature=0.1))

    Reference:
        Chen, Kornblith, Norouzi, Hinton, "A Simple Framework for Contrastive
        Learning of Visual Representations", ICML 2020; Oord, Li, Vinyals,
        "Representation Learning with Contrastive Predictive Coding", 2018.
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)

    logit_terms = staticmethod(ntxent_terms)

    def __init__(self, temperature=0.07, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="ntxent", dtype=None):
        super().__init__(temperature, metric=metric, miner=miner, reduction=reduction,
                         name=name, dtype=dtype)
