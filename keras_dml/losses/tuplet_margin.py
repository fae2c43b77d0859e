"""Tuplet margin loss (Yu and Tao, ICCV 2019): one softmax term per positive pair."""

import math

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["TupletMargin"]

#: 1 - s^2 below it is held there: cos(theta - m)'s slope stays finite at s = +-1
_SINE_SQUARED_FLOOR = 1e-12


def margin_cosine(similarity, margin):
    """cos(theta - m) of s = cos(theta), and its derivative w.r.t. s.

    cos(theta - m) = s cos m + sin(theta) sin m with sin(theta) = sqrt(1 - s^2), so
    d/ds = cos m - s sin m / sin(theta); where 1 - s^2 is held at its floor the slope
    is that of the held value (cos m), finite.
    """
    squared_sine = 1.0 - keras.ops.square(similarity)
    open_ = squared_sine > _SINE_SQUARED_FLOOR
    sine = keras.ops.sqrt(keras.ops.maximum(squared_sine, _SINE_SQUARED_FLOOR))
    value = similarity * math.cos(margin) + sine * math.sin(margin)
    slope = math.cos(margin) - keras.ops.where(open_, similarity * math.sin(margin) / sine, 0.0)
    return value, slope


def tuplet_margin_terms(similarity, positive, negative, margin, scale):
    """Mean over positive pairs of the tuplet margin loss, and d value / d S.

    For a positive pair (a, p) with c_ap = cos(theta_ap - m) and the anchor's
    negatives N_a:

        L_ap = log(1 + sum_{n in N_a} exp(scale (s_an - c_ap)))
             = softplus(lse_a - scale c_ap),  lse_a = log sum_{n in N_a} exp(scale s_an)
        L    = 1/|P| sum_{(a, p) in P} L_ap            (0 without positive pairs)

    so dL/ds_ap = -scale sigmoid(x_ap) c'_ap / |P| and dL/ds_an = scale softmax_a(n)
    sum_p sigmoid(x_ap) / |P|, x_ap the softplus argument. A pair whose anchor has no
    negative gives 0 (and still counts in |P|, as in pytorch-metric-learning).
    """
    positive_f = keras.ops.cast(positive, "float32")
    lse, softmax, has_negative = ops.masked_softmax_parts(scale * similarity, negative)
    target, slope = margin_cosine(similarity, margin)
    logits = keras.ops.expand_dims(lse, 1) - scale * target
    kept = positive_f * keras.ops.cast(has_negative, "float32")
    count = keras.ops.sum(positive_f)
    value = keras.ops.divide_no_nan(keras.ops.sum(keras.ops.softplus(logits) * kept), count)
    share = keras.ops.divide_no_nan(keras.ops.sigmoid(logits) * kept, count)
    weights = scale * (softmax * keras.ops.sum(share, axis=1, keepdims=True) - share * slope)
    return value, weights


@register(row_local=False)
class TupletMargin(PairLoss):
    """Tuplet margin loss (Yu and Tao, ICCV 2019, eq. 4 with the margin of eq. 5).

    On cosine similarities s = cos(theta), for every positive pair (a, p) and the
    negatives N_a of its anchor, with the angular margin m applied to the positive:

        L_ap = log(1 + sum_{n in N_a} exp(scale (cos(theta_an) - cos(theta_ap - m))))

    The batch loss is the mean over the (ordered) positive pairs, as
    pytorch-metric-learning's `TupletMarginLoss` reduces it (`pos_pair` reduction),
    not a mean over anchors: the value is batch-global (a scalar, W = d value / d S,
    `register(row_local=False)`). The paper's intra-pair variance regulariser is the
    separate `IntraPairVariance` loss (combine them with `Combined`).

    keras_dml differs from pytorch-metric-learning 2.9 only where PML is not finite:
    PML's arccos has an infinite slope at s = 1 and is NaN for a rounded s > 1; here
    cos(theta - m) = s cos m + sqrt(1 - s^2) sin m with 1 - s^2 held at 1e-12, so
    coinciding points give a finite gradient.

    Args:
        margin: the angular margin m, in degrees. Defaults to 5.73 (PML's default,
            0.1 radians).
        scale: the scale s. Defaults to 64 (PML's default).
        miner: optional `keras_dml.mining.Miner`; its kept positives are the pairs
            averaged over, its kept negatives the N_a.

    Examples:

    >>> loss = keras_dml.losses.TupletMargin(margin=5.73, scale=64)

    Reference:
        Yu and Tao, "Deep Metric Learning with Tuplet Margin Loss", ICCV 2019.
    """

    config_keys = ("miner", "margin", "scale")

    def __init__(self, margin=5.73, scale=64.0, *, miner=None, reduction="sum_over_batch_size",
                 name="tuplet_margin", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.margin = _hyper.finite("margin", margin)
        self.scale = _hyper.positive("scale", scale)

    def compute_terms(self, matrix, pairs):
        return tuplet_margin_terms(matrix, pairs.positive, pairs.negative,
                                   math.radians(self.margin), self.scale)
