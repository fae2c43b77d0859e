"""Smooth-AP (Brown et al. ECCV 2020): a smoothed average precision per anchor."""

import keras
import tensorflow as tf

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register


def _positive_slots(positive):
    """Column indices (N, P) of each row's positives, padded, and which slots hold one.

    P is the largest row count (N under XLA, which needs a static shape)."""
    n = tf.shape(positive)[1]
    counts = tf.reduce_sum(tf.cast(positive, tf.int32), axis=1)
    slots = n if ops.in_xla_context() else tf.maximum(tf.reduce_max(counts), 1)
    # top_k of the mask lists each row's positives first, lowest index first
    marks = tf.cast(positive, tf.float32) * 2.0 - tf.cast(tf.range(n), tf.float32)[None] / (
        tf.cast(n, tf.float32) + 1.0)
    _, index = tf.math.top_k(marks, k=slots)
    valid = tf.range(slots)[tf.newaxis, :] < counts[:, tf.newaxis]
    return index, valid, counts


def smooth_ap_terms(matrix, positive, negative, temperature):
    """1 - Smooth-AP per anchor and its exact derivative w.r.t. the similarities.

    For anchor q with positive set P and retrieval set A = P u N (the masks),
    G(x) = sigmoid(x / tau) and D_rb = s_qb - s_qr (eq. 9 of the paper):

        R+(r) = 1 + sum_{b in P, b != r} G(D_rb),   R(r) = 1 + sum_{b in A, b != r} G(D_rb)
        AP_q  = 1/|P| sum_{r in P} R+(r) / R(r),     L_q = 1 - AP_q

    The work is |P| N per anchor (no N^3 tensor). Anchors without a positive give 0.
    """
    index, valid, counts = _positive_slots(positive)
    shape = tf.shape(matrix)
    n, m = shape[0], shape[1]
    retrieval = tf.cast(tf.logical_or(positive, negative), tf.float32)[:, tf.newaxis, :]
    in_positive = tf.cast(positive, tf.float32)[:, tf.newaxis, :]
    ranked = tf.gather(matrix, index, batch_dims=1)  # s_qr, (N, P)
    not_self = tf.cast(tf.not_equal(index[:, :, tf.newaxis], tf.range(m)[None, None]),
                       tf.float32)
    sig = tf.sigmoid((matrix[:, tf.newaxis, :] - ranked[:, :, tf.newaxis]) / temperature)
    sig = sig * not_self  # (N, P, M)
    rank_positive = 1.0 + tf.reduce_sum(sig * in_positive, axis=2)
    rank_all = 1.0 + tf.reduce_sum(sig * retrieval, axis=2)
    inverse_count = tf.where(counts > 0, 1.0 / tf.cast(tf.maximum(counts, 1), tf.float32), 0.0)
    slot = tf.cast(valid, tf.float32) * inverse_count[:, tf.newaxis]
    value = tf.where(counts > 0, 1.0 - tf.reduce_sum(slot * rank_positive / rank_all, axis=1),
                     tf.zeros_like(inverse_count))
    # d AP / d s_qb = sum_r G'_rb (c_r [b in P] - e_r [b in A]) - [b = r] sum_b' (...)
    c = slot / rank_all
    e = slot * rank_positive / tf.square(rank_all)
    slope = sig * (1.0 - sig) / temperature
    part = slope * (c[:, :, tf.newaxis] * in_positive - e[:, :, tf.newaxis] * retrieval)
    rows = tf.broadcast_to(tf.range(n)[:, tf.newaxis], tf.shape(index))
    scatter = tf.stack([tf.reshape(rows, [-1]), tf.reshape(index, [-1])], axis=1)
    own = tf.scatter_nd(scatter, tf.reshape(tf.reduce_sum(part, axis=2), [-1]), shape)
    return value, own - tf.reduce_sum(part, axis=1)


@register()
class SmoothAP(PairLoss):
    """Smooth-AP loss (Brown, Xie, Kalogeiton, Zisserman, ECCV 2020, eq. 9-10).

    Average precision of each anchor's ranking of the batch, with the rank's
    indicator replaced by a sigmoid of temperature tau: for anchor q with
    positives P_q and all other batch samples A_q,

        AP_q = 1/|P_q| sum_{i in P_q} (1 + sum_{j in P_q, j != i} G(s_qj - s_qi))
                                     / (1 + sum_{j in A_q, j != i} G(s_qj - s_qi))

    G(x) = 1 / (1 + exp(-x / tau)), and L = 1/N sum_q (1 - AP_q) (eq. 10 averaged
    over all anchors). By default (`include_anchor=True`) the anchor itself is one
    of its own positives and in its retrieval set, as in the authors' code and
    pytorch-metric-learning's `SmoothAPLoss`; `include_anchor=False` is the
    paper's eq. 9 with the query excluded. Works on any batch (PML needs sorted
    labels with equal class counts); the gradient is exact, at |P| N cost per
    anchor rather than N^2.

    Args:
        temperature: tau. Defaults to 0.01 (the paper's).
        include_anchor: see above. Defaults to True.
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.SmoothAP(temperature=0.01)

    Reference:
        Brown, Xie, Kalogeiton, Zisserman, "Smooth-AP: Smoothing the Path Towards
        Large-Scale Image Retrieval", ECCV 2020.
    """

    def __init__(self, temperature=0.01, include_anchor=True, miner=None,
                 reduction="sum_over_batch_size", name="smooth_ap", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.temperature = _hyper.positive("temperature", temperature)
        self.include_anchor = bool(include_anchor)

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        if self.include_anchor:
            diagonal = tf.ones_like(tf.linalg.diag_part(positive))
            positive = tf.linalg.set_diag(positive, diagonal)
        return smooth_ap_terms(matrix, positive, negative, self.temperature)

    def get_config(self):
        config = super().get_config()
        config.pop("metric")
        config.update(temperature=self.temperature, include_anchor=self.include_anchor)
        return config
