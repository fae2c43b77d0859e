"""Histogram loss (Ustinova and Lempitsky 2016): a batch-global pair loss."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["Histogram"]


def _soft_histogram(similarity, mask, bins):
    """Node indices, interpolation and the normalised linear-binned histogram (eq. 4-5).

    Nodes t_r = -1 + r Delta, r = 0 .. R-1, Delta = 2 / (R - 1). A similarity in
    [t_p, t_{p+1}] puts (t_{p+1} - S) / Delta on node p and (S - t_p) / Delta on
    node p + 1.
    """
    delta = 2.0 / (bins - 1)
    position = (keras.ops.clip(similarity, -1.0, 1.0) + 1.0) / delta
    lower = keras.ops.clip(keras.ops.floor(position), 0.0, bins - 2.0)
    upper_share = position - lower
    index = keras.ops.cast(lower, "int32")
    mask_f = keras.ops.cast(mask, "float32")
    count = keras.ops.sum(mask_f)
    flat_index = keras.ops.reshape(index, (-1,))
    histogram = keras.ops.segment_sum(
        keras.ops.reshape(mask_f * (1.0 - upper_share), (-1,)), flat_index, bins
    ) + keras.ops.segment_sum(
        keras.ops.reshape(mask_f * upper_share, (-1,)), flat_index + 1, bins
    )
    return index, keras.ops.divide_no_nan(histogram, count), count


def histogram_terms(similarity, positive, negative, bins):
    """Histogram loss (scalar, eq. 3) and dL/dS for every pair (eq. 9 and its mirror).

    Exact wherever the derivative exists (everywhere but on the nodes). |S+| and |S-|
    count ordered pairs of the matrix, so each unordered pair appears twice in the
    histograms (which does not change them) and S_ij and S_ji each carry a weight.
    """
    delta = 2.0 / (bins - 1)
    index, positive_hist, positive_count = _soft_histogram(similarity, positive, bins)
    _, negative_hist, negative_count = _soft_histogram(similarity, negative, bins)
    value = keras.ops.sum(negative_hist * keras.ops.cumsum(positive_hist))
    pull = keras.ops.divide_no_nan(primitives.gather(negative_hist, index),
                                   delta * positive_count)
    push = keras.ops.divide_no_nan(primitives.gather(positive_hist, index + 1),
                                   delta * negative_count)
    weights = keras.ops.where(negative, push, 0.0) - keras.ops.where(positive, pull, 0.0)
    return value, weights


@register(row_local=False)
class Histogram(PairLoss):
    """Histogram loss (Ustinova and Lempitsky 2016), MS supplementary eq. 3-9.

    The cosine similarities of the batch's positive pairs and of its negative pairs
    are binned into two R-node histograms h+ and h- by linear interpolation
    (eq. 4-5, nodes t_r = -1 + r Delta, Delta = 2 / (R - 1)), and

        L = sum_{r=1}^R h_r^- sum_{q=1}^r h_q^+        (eq. 3)

    estimates the probability that a negative pair is more similar than a positive
    one. The loss is batch-global: one scalar for the whole batch (not a mean over
    anchors; a `sample_weight` vector only scales it by its mean). Its weights are
    the exact dL/dS of eq. 9 (almost everywhere): -h_p^- / (Delta |S+|) for a
    positive pair with S in [t_p, t_{p+1}], +h_{p+1}^+ / (Delta |S-|) for a
    negative pair. A batch without positive or negative pairs gives 0.

    Args:
        bins: R, the number of histogram nodes (R - 1 intervals). Defaults to 101
            (Delta = 0.02, the same nodes as pytorch-metric-learning's default
            n_bins=100).
        miner: optional `keras_dml.mining.Miner`; the histograms then hold the kept
            pairs only. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.Histogram(bins=151)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Ustinova and Lempitsky, "Learning Deep Embeddings with Histogram Loss",
        NeurIPS 2016; MS supplementary eq. 3-9.
    """

    config_keys = ("miner", "bins")

    def __init__(self, bins=101, *, miner=None, reduction="sum_over_batch_size",
                 name="histogram", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.bins = _hyper.integer_at_least("bins", bins, 2)

    def compute_terms(self, matrix, pairs):
        return histogram_terms(matrix, pairs.positive, pairs.negative, self.bins)
