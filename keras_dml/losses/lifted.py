"""Lifted structure losses: the original (Song et al. 2016) and the generalised form."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["GeneralizedLiftedStructure", "LiftedStructure"]

# An empty row's log-sum-exp: finite, and exp(_EMPTY - x) underflows to 0.
_EMPTY = -1e30


class _MarginAndMetric(PairLoss):
    """What both lifted losses share: a finite margin and a cosine/euclidean metric."""

    metrics = ("cosine", "euclidean")
    config_keys = PairLoss.config_keys + ("margin",)

    def __init__(self, margin, *, metric, miner, reduction, name, dtype):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.margin = _hyper.finite("margin", margin)


@register(reference="batch", row_local=False)
class LiftedStructure(_MarginAndMetric):
    """Lifted structured embedding loss (Oh Song et al. 2016), the original with a margin.

    For every positive pair (i, j), with c = -D (Euclidean distance) or c = S
    (cosine similarity), the negatives of both ends are "lifted" into one soft max:

        J_ij = log( sum_{k in N_i} exp(margin + c_ik) + sum_{l in N_j} exp(margin + c_jl) ) - c_ij
        L    = 1 / (2 |P|) * sum_{(i, j) in P} [J_ij]_+^2

    (for distances, margin + c = margin - D as in the paper's eq. 4). Because J_ij
    uses rows i and j, the loss is batch-global: the value is a scalar and its
    weights dL/dM are exact, in O(N^2). The sum runs over ordered pairs, twice the
    paper's unordered sum, divided by twice as many pairs. A positive pair whose
    two ends have no negative contributes nothing.

    Args:
        margin: alpha. Defaults to 1.0.
        metric: "euclidean" (the paper) or "cosine". Defaults to "euclidean".
            (`distance=` is its deprecated name.) The reference set must be the
            batch: J_ij uses the negatives of both ends of a pair.
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.LiftedStructure(margin=1.0)

    Reference:
        Oh Song, Xiang, Jegelka, Savarese, "Deep Metric Learning via Lifted
        Structured Feature Embedding", CVPR 2016, eq. 3-4.
    """

    default_metric = "euclidean"

    @_hyper.renamed_keywords(distance="metric")
    def __init__(self, margin=1.0, *, metric="euclidean", miner=None,
                 reduction="sum_over_batch_size", name="lifted_structure", dtype=None):
        super().__init__(margin, metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)

    def check_reference(self, reference, embeddings):
        raise ValueError("LiftedStructure uses the negatives of both ends of every positive "
                         "pair: its reference set is the batch itself, not an explicit one.")

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        sign = -1.0 if self.is_distance else 1.0
        closeness = sign * matrix
        # [lifted negatives] per row, log sum_{N_i} exp(c_ik) and its softmax
        row_lse = ops.masked_logsumexp(closeness, negative, empty_value=_EMPTY)
        softmax = ops.masked_softmax(closeness, negative)
        has_negative = keras.ops.any(negative, axis=1)
        valid = positive & (has_negative[:, None] | has_negative[None, :])
        first, second = row_lse[:, None], row_lse[None, :]
        top = keras.ops.maximum(first, second)
        pair_lse = top + keras.ops.log(keras.ops.exp(first - top) + keras.ops.exp(second - top))
        # [loss] J_ij = margin + log(e^{lse_i} + e^{lse_j}) - c_ij, hinged and squared
        hinge = keras.ops.where(valid, keras.ops.relu(self.margin + pair_lse - closeness), 0.0)
        pairs = keras.ops.sum(keras.ops.cast(valid, "float32"))
        value = keras.ops.divide_no_nan(keras.ops.sum(keras.ops.square(hinge)), 2.0 * pairs)
        # [weighting] dL/dc: -h_ij/|P| on positives; negatives of row i collect
        # softmax_ik * sum_j (h_ij + h_ji)/|P| * e^{lse_i} / (e^{lse_i} + e^{lse_j})
        share = keras.ops.sigmoid(row_lse[:, None] - row_lse[None, :])
        scaled = keras.ops.divide_no_nan(hinge, pairs)
        lifted = keras.ops.sum((scaled + keras.ops.transpose(scaled)) * share, axis=1)
        gradient = softmax * lifted[:, None] - scaled
        return value, sign * gradient


@register()
class GeneralizedLiftedStructure(_MarginAndMetric):
    """Generalised lifted structure loss (Hermans et al. 2017; unified view eq. 9-11).

    For each anchor i with positives P_i and negatives N_i, with c = S (cosine
    similarity) or c = -D (Euclidean distance):

        L_i = [ margin + log sum_{k in P_i} exp(-c_ik) + log sum_{k in N_i} exp(c_ik) ]_+

    (for distances: [log sum_P exp(D_ik) + log sum_N exp(margin - D_ik)]_+, Hermans'
    form). The batch loss is the mean over anchors (eq. 9's 1/m). While the hinge
    is active the weights are the softmaxes of eq. 10-11,
    w_ij = exp(-c_ij) / sum_{P_i} exp(-c_ik) and exp(c_ij) / sum_{N_i} exp(c_ik),
    the exact derivatives; otherwise 0. Anchors lacking positives or negatives
    contribute 0.

    Args:
        margin: defaults to 1.0.
        metric: "cosine" or "euclidean". Defaults to "cosine". (`distance=` is its
            deprecated name.)
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.GeneralizedLiftedStructure(margin=1.0)

    Reference:
        Hermans, Beyer, Leibe, "In Defense of the Triplet Loss for Person
        Re-Identification", 2017; unified view eq. 9-11.
    """

    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    @_hyper.renamed_keywords(distance="metric")
    def __init__(self, margin=1.0, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="generalized_lifted_structure", dtype=None):
        super().__init__(margin, metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        sign = -1.0 if self.is_distance else 1.0
        closeness = sign * matrix
        valid = keras.ops.any(positive, axis=1) & keras.ops.any(negative, axis=1)
        inside = (self.margin + ops.masked_logsumexp(-closeness, positive)
                  + ops.masked_logsumexp(closeness, negative))
        active = valid & (inside > 0)
        value = keras.ops.where(active, inside, 0.0)
        gradient = ops.masked_softmax(closeness, negative) - ops.masked_softmax(
            -closeness, positive)
        gradient = keras.ops.where(active[:, None], gradient, 0.0)
        return value, sign * gradient
