"""Intra-pair variance loss (Yu and Tao, ICCV 2019): pairs held near their set's mean."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["IntraPairVariance"]


def spread_terms(matrix, kept, sign, factor):
    """1/|K| sum_{K} [sign (m_ij - factor mean_K m)]_+^2 over the pairs K, and d / d m.

    With h_ij the hinge and n = |K|: d/dm_kl = 2 sign (h_kl - factor sum_K h / n) / n
    on K (the mean is differentiated too), 0 elsewhere and for an empty K.
    """
    kept_f = keras.ops.cast(kept, "float32")
    count = keras.ops.sum(kept_f)
    mean = keras.ops.divide_no_nan(keras.ops.sum(matrix * kept_f), count)
    hinge = keras.ops.relu(sign * (matrix - factor * mean)) * kept_f
    value = keras.ops.divide_no_nan(keras.ops.sum(keras.ops.square(hinge)), count)
    total = keras.ops.divide_no_nan(keras.ops.sum(hinge), count)
    weights = keras.ops.divide_no_nan(2.0 * sign * (hinge - factor * total * kept_f), count)
    return value, weights


@register(row_local=False)
class IntraPairVariance(PairLoss):
    """Intra-pair variance loss (Yu and Tao, ICCV 2019, the regulariser of eq. 6).

    Keeps each positive and each negative pair's similarity near the mean of its
    set, so that the pairs' similarities do not spread. On cosine similarities s,
    with E+ and E- the means over the positive pairs P and the negative pairs N:

        L = 1/|P| sum_{(i,j) in P} [(1 - eps+) E+ - s_ij]_+^2
          + 1/|N| sum_{(i,j) in N} [s_ij - (1 + eps-) E-]_+^2

    On distances d (metric "euclidean" or "squared_euclidean") the directions flip:
    [d_ij - (1 + eps+) E+]_+^2 and [(1 - eps-) E- - d_ij]_+^2, as
    pytorch-metric-learning 2.9's `IntraPairVarianceLoss` does for a distance. The
    means are differentiated, and the value is batch-global (a scalar, mean over
    pairs as PML reduces it, W = d value / d M). The paper adds it to the tuplet
    margin loss: `Combined([TupletMargin(), IntraPairVariance()])`.

    Args:
        pos_eps: eps+. Defaults to 0.01 (PML's default).
        neg_eps: eps-. Defaults to 0.01 (PML's default).
        metric: "cosine" (PML's default `CosineSimilarity`), "dot", "euclidean"
            or "squared_euclidean" (PML's `LpDistance` normalises the embeddings
            first: pass unit embeddings for its default). Defaults to "cosine".
        miner: optional `keras_dml.mining.Miner`: P and N are its kept pairs.

    Examples:

    >>> loss = keras_dml.losses.IntraPairVariance(pos_eps=0.01, neg_eps=0.01)

    Reference:
        Yu and Tao, "Deep Metric Learning with Tuplet Margin Loss", ICCV 2019.
    """

    config_keys = PairLoss.config_keys + ("pos_eps", "neg_eps")

    def __init__(self, pos_eps=0.01, neg_eps=0.01, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="intra_pair_variance", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.pos_eps = _hyper.finite("pos_eps", pos_eps)
        self.neg_eps = _hyper.finite("neg_eps", neg_eps)

    def compute_terms(self, matrix, pairs):
        sign = 1.0 if self.is_distance else -1.0  # the positives' direction of harm
        pull, pull_weights = spread_terms(matrix, pairs.positive, sign,
                                          1.0 + sign * self.pos_eps)
        push, push_weights = spread_terms(matrix, pairs.negative, -sign,
                                          1.0 - sign * self.neg_eps)
        return pull + push, pull_weights + push_weights
