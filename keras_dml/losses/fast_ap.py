"""FastAP (Cakir et al. CVPR 2019): average precision per anchor from soft distance
histograms."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["FastAP"]

#: the squared Euclidean distance of unit vectors, 2 - 2 s, lies in [0, 4]
_DISTANCE_RANGE = 4.0


def _reverse_cumsum(x):
    """sum_{k' >= k} x[:, k'] for each k."""
    return keras.ops.flip(keras.ops.cumsum(keras.ops.flip(x, axis=1), axis=1), axis=1)


def fast_ap_terms(similarity, positive, negative, num_bins):
    """1 - FastAP per anchor and its exact derivative w.r.t. the cosine similarities.

    With d = 2 - 2 s, bin centres z_k = k Delta (k = 0..B, Delta = 4 / B) and the
    triangular pulse delta_k(d) = [1 - |d - z_k| / Delta]_+, per anchor:

        h+_k = sum_{j in P} delta_k(d_j),  h-_k = sum_{j in N} delta_k(d_j)
        H+_k = sum_{k' <= k} h+_k',         H_k = sum_{k' <= k} h+_k' + h-_k'
        FastAP = 1/|P| sum_k h+_k H+_k / H_k

    d FastAP / d h+_j = (H+_j / H_j + sum_{k >= j} h+_k (H_k - H+_k) / H_k^2) / |P|
    and d FastAP / d h-_j = -sum_{k >= j} h+_k H+_k / H_k^2 / |P|; the pulses'
    slopes -sign(d - z_k) / Delta carry them to d, and dd/ds = -2. One (N, M) pass
    per bin, forward and backward. Anchors without a positive give 0.
    """
    delta = _DISTANCE_RANGE / num_bins
    distance = 2.0 - 2.0 * similarity
    in_positive = keras.ops.cast(positive, "float32")
    in_negative = keras.ops.cast(negative, "float32")

    def pulse(k):
        return keras.ops.relu(1.0 - keras.ops.abs(distance - k * delta) / delta)

    pulses = [pulse(k) for k in range(num_bins + 1)]
    h_pos = keras.ops.stack([keras.ops.sum(p * in_positive, axis=1) for p in pulses], axis=1)
    h_neg = keras.ops.stack([keras.ops.sum(p * in_negative, axis=1) for p in pulses], axis=1)
    total_pos = keras.ops.cumsum(h_pos, axis=1)
    total = keras.ops.cumsum(h_pos + h_neg, axis=1)
    inverse_total = keras.ops.divide_no_nan(1.0, total)
    counts = keras.ops.sum(in_positive, axis=1)
    share = keras.ops.divide_no_nan(1.0, counts)
    precision = keras.ops.sum(h_pos * total_pos * inverse_total, axis=1) * share
    value = keras.ops.where(counts > 0, 1.0 - precision, 0.0)
    # d value / d h+ and d value / d h- (value = 1 - FastAP), (N, B + 1)
    squared = keras.ops.square(inverse_total)
    on_pos = -share[:, None] * (total_pos * inverse_total
                                + _reverse_cumsum(h_pos * (total - total_pos) * squared))
    on_neg = share[:, None] * _reverse_cumsum(h_pos * total_pos * squared)
    weights = keras.ops.zeros_like(similarity)
    for k in range(num_bins + 1):
        # d pulse_k / d s = -2 d pulse_k / d d = 2 sign(d - z_k) / Delta inside the pulse
        slope = keras.ops.where(pulses[k] > 0.0,
                                2.0 / delta * keras.ops.sign(distance - k * delta), 0.0)
        weights += slope * (on_pos[:, k:k + 1] * in_positive + on_neg[:, k:k + 1] * in_negative)
    return value, weights


@register()
class FastAP(PairLoss):
    """FastAP loss (Cakir, He, Xia, Kulis, Sclaroff, CVPR 2019).

    Average precision of each anchor's ranking of the batch by distance, with the
    ranking replaced by histograms of the distances to its positives and negatives
    under triangular (linear-interpolation) binning. With d = |u - v|^2 = 2 - 2 s
    the squared Euclidean distance of the unit embeddings u, v (range [0, 4]), B
    bins of width Delta = 4 / B centred on z_k = k Delta (k = 0..B) and
    delta_k(d) = max(0, 1 - |d - z_k| / Delta), for anchor q with positives P_q
    and negatives N_q:

        h+_k = sum_{j in P_q} delta_k(d_qj),   h-_k = sum_{j in N_q} delta_k(d_qj)
        H+_k = sum_{k' <= k} h+_k',            H_k = sum_{k' <= k} (h+_k' + h-_k')
        FastAP_q = 1/|P_q| sum_k h+_k H+_k / H_k,     L_q = 1 - FastAP_q

    (the paper's histogram approximation of AP with its soft binning), and the
    loss is the mean of L_q over the anchors. Its derivative is exact (the
    pulses are piecewise linear: exact except at the bin centres and edges).

    pytorch-metric-learning 2.9's `FastAPLoss` (the authors' code, on PML's
    `LpDistance(power=2)` of normalised embeddings) computes the same value and
    gradient; it averages over the anchors with a positive only, where this loss
    gives anchors without one 0 (the two agree on C x k batches with k >= 2). A
    miner's kept pairs are the histograms' members (PML multiplies each anchor's
    loss by a miner weight instead).

    Args:
        num_bins: B, the number of histogram bins over [0, 4]. Defaults to 10
            (PML's; the paper tunes B around 10-20).
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.FastAP(num_bins=10)

    Reference:
        Cakir, He, Xia, Kulis, Sclaroff, "Deep Metric Learning to Rank", CVPR 2019.
    """

    config_keys = ("miner", "num_bins")

    def __init__(self, num_bins=10, *, miner=None, reduction="sum_over_batch_size",
                 name="fast_ap", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.num_bins = _hyper.integer_at_least("num_bins", num_bins, 1)

    def compute_terms(self, matrix, pairs):
        return fast_ap_terms(matrix, pairs.positive, pairs.negative, self.num_bins)
