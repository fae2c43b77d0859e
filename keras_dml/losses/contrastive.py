"""Contrastive loss on cosine similarities or Euclidean distances."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["Contrastive"]


@register()
class Contrastive(PairLoss):
    """Contrastive loss (Hadsell et al. 2006), with positive and negative margins.

    `metric="cosine"` (unified view eq. 5, with a positive margin): on cosine
    similarities S, for each anchor i,

        L_i = sum_{j in P_i} [pos_margin - S_ij]_+ + sum_{j in N_i} [S_ij - neg_margin]_+

    whose pair weights are 1 for every active pair and 0 otherwise (eq. 6). With
    `pos_margin=1` every positive is active and the positive term is eq. 5's -S_ij
    up to a constant.

    `metric="euclidean"` (weighted contrastive paper eq. 4-5): on Euclidean
    distances D, g(d) = [d - pos_margin]_+^2 for positives and
    h(d) = [neg_margin - d]_+^2 for negatives; with `pos_margin=0`, g(d) = d^2 as in
    eq. 5 and `neg_margin` is the paper's alpha. Weights 2 [d - m_p]_+ and
    2 [m_n - d]_+ are the exact derivatives.

    Normalisation: each anchor sums over all its pairs (ordered pairs, so each
    unordered pair of eq. 4 counts from both ends) and the batch loss is the mean
    over anchors.

    Args:
        pos_margin: defaults to 1.0 for cosine, 0.0 for euclidean.
        neg_margin: defaults to 0.5 for cosine, 1.0 for euclidean.
        metric: "cosine" or "euclidean". Defaults to "cosine". (`distance=` is
            its deprecated name.)
        miner: optional miner, e.g. `PairMarginMiner()` or a triplet miner
            (`SemiHardMiner()` keeps the positives that have a semi-hard negative
            and those negatives).

    Examples:

    >>> loss = keras_dml.losses.Contrastive()  # cosine, unified view eq. 5
    >>> loss = keras_dml.losses.Contrastive(metric="euclidean", neg_margin=1.0)  # eq. 4-5

    Reference:
        Hadsell, Chopra, LeCun, "Dimensionality Reduction by Learning an Invariant
        Mapping", CVPR 2006; unified view eq. 5-6; weighted contrastive eq. 4-5.
    """

    metrics = ("cosine", "euclidean")
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    @property
    def xla_terms(self):
        """Its terms fused by XLA on cosine similarities (PairLoss.xla_terms); the
        Euclidean terms stay in the graph."""
        return self.metric == "cosine"

    config_keys = PairLoss.config_keys + ("pos_margin", "neg_margin")

    @_hyper.renamed_keywords(distance="metric")
    def __init__(self, pos_margin=None, neg_margin=None, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="contrastive", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        cosine = self.metric == "cosine"
        check = _hyper.finite if cosine else _hyper.non_negative
        self.pos_margin = check("pos_margin", (1.0 if cosine else 0.0)
                                if pos_margin is None else pos_margin)
        self.neg_margin = check("neg_margin", (0.5 if cosine else 1.0)
                                if neg_margin is None else neg_margin)

    def compute_terms(self, matrix, pairs):
        positive = keras.ops.cast(pairs.positive, "float32")
        negative = keras.ops.cast(pairs.negative, "float32")
        if self.metric == "cosine":
            pull = keras.ops.relu(self.pos_margin - matrix) * positive
            push = keras.ops.relu(matrix - self.neg_margin) * negative
            value = keras.ops.sum(pull + push, axis=1)
            weights = keras.ops.cast(push > 0, "float32") - keras.ops.cast(pull > 0, "float32")
            return value, weights
        pull = keras.ops.relu(matrix - self.pos_margin) * positive
        push = keras.ops.relu(self.neg_margin - matrix) * negative
        value = keras.ops.sum(keras.ops.square(pull) + keras.ops.square(push), axis=1)
        return value, 2.0 * (pull - push)
