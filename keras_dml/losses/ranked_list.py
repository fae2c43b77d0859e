"""Ranked list loss (Wang et al., CVPR 2019): weighted margins to two boundaries."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.margin import _sphere_distance
from keras_dml.losses.registry import register

__all__ = ["RankedList"]

#: pytorch-metric-learning adds it to the weight of every column of a row's
#: denominator (so a row without violating pairs divides 0 by M x 1e-5)
_COLUMN_EPSILON = 1e-5


def weighted_violations(excess, kept, temperature, columns):
    """sum_j w_j x_j / (sum_j w_j + M eps) over the kept x_j > 0 with w_j = exp(T x_j),
    and its derivative w.r.t. each x_j: w_j (1 + T x_j - T value) / denominator.

    Computed with the weights divided by exp(T max_j x_j) (T >= 0, so no overflow).
    """
    scaled = temperature * excess
    shift = keras.ops.stop_gradient(ops.masked_max(scaled, kept, axis=1, keepdims=True))
    weights = keras.ops.where(kept, keras.ops.exp(keras.ops.where(kept, scaled - shift, 0.0)),
                              0.0)  # no exp of the unkept (inf at large T, NaN in autodiff)
    denominator = (keras.ops.sum(weights, axis=1, keepdims=True)
                   + columns * _COLUMN_EPSILON * keras.ops.exp(-shift))
    value = keras.ops.sum(weights * excess, axis=1, keepdims=True) / denominator
    slope = weights * (1.0 + scaled - temperature * value) / denominator
    return keras.ops.squeeze(value, 1), slope


def ranked_list_terms(distance, positive, negative, alpha, margin, imbalance, tp, tn):
    """Per-anchor ranked list loss on distances and its exact derivative w.r.t. them.

    P*_a: positives farther than alpha - m; N*_a: negatives closer than alpha.

        L_P(a) = sum_{P*_a} w_ap (d_ap - (alpha - m)) / (sum_{P*_a} w_ap + M eps),
            w_ap = exp(Tp (d_ap - (alpha - m)))
        L_N(a) = sum_{N*_a} w_an (alpha - d_an) / (sum_{N*_a} w_an + M eps),
            w_an = exp(Tn (alpha - d_an))
        L(a)   = (1 - imbalance) L_P(a) + imbalance L_N(a)

    The weights are differentiated (as pytorch-metric-learning does), so the exact
    derivative of a weighted average can be negative where Tp, Tn > 0.
    """
    columns = keras.ops.cast(keras.ops.shape(distance)[1], "float32")
    boundary = alpha - margin
    pulled = keras.ops.logical_and(positive, distance > boundary)
    pushed = keras.ops.logical_and(negative, distance < alpha)
    pull, pull_slope = weighted_violations(distance - boundary, pulled, tp, columns)
    push, push_slope = weighted_violations(alpha - distance, pushed, tn, columns)
    value = (1.0 - imbalance) * pull + imbalance * push
    return value, (1.0 - imbalance) * pull_slope - imbalance * push_slope


@register()
class RankedList(PairLoss):
    """Ranked list loss (Wang, Hua, Kodirov, Hu, Garnier, Robertson, CVPR 2019).

    Each anchor's ranked list of the batch: positives should lie within alpha - m
    of it, negatives beyond alpha (the pairwise margin loss, eq. 1). Only the
    violating pairs are mined (P*, N*, eq. 2-3) and averaged with weights that
    grow with the violation (eq. 4-6; Tp = 0 is the paper's "RLL-Simpler", equal
    weights over the positives):

        L_P(a) = sum_{j in P*_a} w_aj (d_aj - (alpha - m)) / sum_{j in P*_a} w_aj,
                 w_aj = exp(Tp (d_aj - (alpha - m)))
        L_N(a) = sum_{k in N*_a} w_ak (alpha - d_ak) / sum_{k in N*_a} w_ak,
                 w_ak = exp(Tn (alpha - d_ak))
        L      = 1/N sum_a [(1 - imbalance) L_P(a) + imbalance L_N(a)]   (eq. 7)

    d is the Euclidean distance: between L2-normalised embeddings with
    `metric="cosine"` (d = sqrt(2 - 2 s), pytorch-metric-learning's default
    `LpDistance()`), or between the raw embeddings with `metric="euclidean"` (PML's
    `LpDistance(normalize_embeddings=False)`). As PML 2.9's `RankedListLoss`, each
    denominator also adds 1e-5 for every key of the row (an anchor without a
    violating pair gives 0), and the weights are differentiated, so some exact pair
    weights are negative (`weighting.pair_weights` keeps their sign). Where keras_dml
    differs: PML drops a pair at distance exactly 0 from P* and N*; here a
    coinciding negative is in N* (with a zero gradient, the distance's slope at 0).

    Args:
        margin: m, the gap between the positive boundary alpha - m and alpha.
            Defaults to 0.4 (PML 2.9 has no default: it must be given there).
        Tn: the negatives' weighting temperature. Defaults to 10 (PML 2.9 has no
            default). Large values are safe here: the weights are computed shifted.
        imbalance: lambda, the negatives' share of the loss, in [0, 1]. Defaults to
            0.5 (PML's default).
        alpha: the negative boundary; None: 1 + m / 2 (PML's default, 1.2 with
            m = 0.4 as in the paper).
        Tp: the positives' weighting temperature. Defaults to 0 (PML's default).
        metric: "cosine" (distances on the unit sphere) or "euclidean". Defaults
            to "cosine".
        miner: optional `keras_dml.mining.Miner`, before the loss's own mining.

    Examples:

    >>> loss = keras_dml.losses.RankedList(margin=0.4, Tn=10)

    Reference:
        Wang, Hua, Kodirov, Hu, Garnier, Robertson, "Ranked List Loss for Deep
        Metric Learning", CVPR 2019.
    """

    metrics = ("cosine", "euclidean")
    config_keys = PairLoss.config_keys + ("margin", "Tn", "imbalance", "alpha", "Tp")

    def __init__(self, margin=0.4, Tn=10.0, imbalance=0.5, alpha=None, Tp=0.0, *,  # noqa: N803
                 metric="cosine", miner=None, reduction="sum_over_batch_size",
                 name="ranked_list", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.margin = _hyper.finite("margin", margin)
        self.Tn = _hyper.non_negative("Tn", Tn)
        self.imbalance = _hyper.finite("imbalance", imbalance)
        if not 0.0 <= self.imbalance <= 1.0:
            raise ValueError(f"imbalance must be in [0, 1], got {imbalance!r}.")
        self.alpha = (1.0 + self.margin / 2.0 if alpha is None
                      else _hyper.finite("alpha", alpha))
        self.Tp = _hyper.non_negative("Tp", Tp)

    def compute_terms(self, matrix, pairs):
        if self.metric == "euclidean":
            distance, slope = matrix, 1.0
        else:
            distance, slope = _sphere_distance(matrix)
        value, weights = ranked_list_terms(distance, pairs.positive, pairs.negative,
                                           self.alpha, self.margin, self.imbalance,
                                           self.Tp, self.Tn)
        return value, weights * slope
