"""Lifted structure losses: the original (Song et al. 2016) and the generalised form."""

import keras
import tensorflow as tf

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss

_DISTANCES = ("cosine", "euclidean")
# An empty row's log-sum-exp: finite, and exp(_EMPTY - x) underflows to 0.
_EMPTY = -1e30


class _MarginAndDistance(PairLoss):
    """What both lifted losses share: a finite margin and a cosine/euclidean metric."""

    def __init__(self, margin, distance, miner, reduction, name, dtype):
        if distance not in _DISTANCES:
            raise ValueError(f"distance must be one of {_DISTANCES}, got {distance!r}.")
        self.margin, self.distance = _hyper.finite("margin", margin), distance
        super().__init__(metric=distance, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)

    def get_config(self):
        config = super().get_config()
        config.pop("metric")
        config.update(margin=self.margin, distance=self.distance)
        return config


@keras.saving.register_keras_serializable(package="keras_dml")
class LiftedStructure(_MarginAndDistance):
    """Lifted structured embedding loss (Oh Song et al. 2016), the original with a margin.

    For every positive pair (i, j), with c = -D (Euclidean distance) or c = S
    (cosine similarity), the negatives of both ends are "lifted" into one soft max:

        J_ij = log( sum_{k in N_i} exp(margin + c_ik) + sum_{l in N_j} exp(margin + c_jl) ) - c_ij
        L    = 1 / (2 |P|) * sum_{(i, j) in P} [J_ij]_+^2

    (for distances, margin + c = margin - D as in the paper's eq. 4). Because J_ij
    uses rows i and j, the loss is batch-global: the value is a scalar and its
    weights dL/dM are exact (computed in O(N^2): a negative (i, k) collects the
    softmax weight of k in N_i times the share of row i in every J_ij, J_ji it
    appears in). The sum runs over ordered pairs, which for a symmetric matrix is
    twice the paper's unordered sum, and it is divided by twice as many pairs.
    A positive pair whose two ends have no negative contributes nothing.

    Args:
        margin: alpha. Defaults to 1.0.
        distance: "euclidean" (the paper) or "cosine". Defaults to "euclidean".
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.LiftedStructure(margin=1.0)

    Reference:
        Oh Song, Xiang, Jegelka, Savarese, "Deep Metric Learning via Lifted
        Structured Feature Embedding", CVPR 2016, eq. 3-4.
    """

    def __init__(self, margin=1.0, distance="euclidean", miner=None,
                 reduction="sum_over_batch_size", name="lifted_structure", dtype=None):
        super().__init__(margin, distance, miner, reduction, name, dtype)

    def compute_terms(self, matrix, positive, negative):
        sign = -1.0 if self.is_distance else 1.0
        closeness = sign * matrix
        # [lifted negatives] per row, log sum_{N_i} exp(c_ik) and its softmax
        row_lse = ops.masked_logsumexp(closeness, negative, empty_value=_EMPTY)
        softmax = ops.masked_softmax(closeness, negative)
        has_negative = tf.reduce_any(negative, axis=1)
        valid = positive & (has_negative[:, tf.newaxis] | has_negative[tf.newaxis, :])
        first, second = row_lse[:, tf.newaxis], row_lse[tf.newaxis, :]
        top = tf.maximum(first, second)
        pair_lse = top + tf.math.log(tf.exp(first - top) + tf.exp(second - top))
        # [loss] J_ij = margin + log(e^{lse_i} + e^{lse_j}) - c_ij, hinged and squared
        hinge = tf.where(valid, tf.nn.relu(self.margin + pair_lse - closeness),
                         tf.zeros_like(closeness))
        pairs = tf.reduce_sum(tf.cast(valid, tf.float32))
        value = tf.math.divide_no_nan(tf.reduce_sum(tf.square(hinge)), 2.0 * pairs)
        # [weighting] dL/dc: -h_ij/|P| on positives; negatives of row i collect
        # softmax_ik * sum_j (h_ij + h_ji)/|P| * e^{lse_i} / (e^{lse_i} + e^{lse_j})
        share = tf.sigmoid(row_lse[:, tf.newaxis] - row_lse[tf.newaxis, :])
        scaled = tf.math.divide_no_nan(hinge, pairs)
        lifted = tf.reduce_sum((scaled + tf.transpose(scaled)) * share, axis=1)
        gradient = softmax * lifted[:, tf.newaxis] - scaled
        return value, sign * gradient


@keras.saving.register_keras_serializable(package="keras_dml")
class GeneralizedLiftedStructure(_MarginAndDistance):
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
        distance: "cosine" or "euclidean". Defaults to "cosine".
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.GeneralizedLiftedStructure(margin=1.0)

    Reference:
        Hermans, Beyer, Leibe, "In Defense of the Triplet Loss for Person
        Re-Identification", 2017; unified view eq. 9-11.
    """

    def __init__(self, margin=1.0, distance="cosine", miner=None,
                 reduction="sum_over_batch_size", name="generalized_lifted_structure",
                 dtype=None):
        super().__init__(margin, distance, miner, reduction, name, dtype)

    def compute_terms(self, matrix, positive, negative):
        sign = -1.0 if self.is_distance else 1.0
        closeness = sign * matrix
        valid = tf.reduce_any(positive, axis=1) & tf.reduce_any(negative, axis=1)
        inside = (self.margin + ops.masked_logsumexp(-closeness, positive)
                  + ops.masked_logsumexp(closeness, negative))
        active = valid & (inside > 0)
        value = tf.where(active, inside, tf.zeros_like(inside))
        gradient = ops.masked_softmax(closeness, negative) - ops.masked_softmax(
            -closeness, positive)
        gradient = tf.where(active[:, tf.newaxis], gradient, tf.zeros_like(gradient))
        return value, sign * gradient
