"""Smooth-AP (Brown et al. ECCV 2020): a smoothed average precision per anchor."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["SmoothAP"]


def smooth_ap_terms(matrix, positive, negative, temperature):
    """1 - Smooth-AP per anchor and its exact derivative w.r.t. the similarities.

    For anchor q with positive set P and retrieval set A = P u N (the masks),
    G(x) = sigmoid(x / tau) and D_rb = s_qb - s_qr (eq. 9 of the paper):

        R+(r) = 1 + sum_{b in P, b != r} G(D_rb),   R(r) = 1 + sum_{b in A, b != r} G(D_rb)
        AP_q  = 1/|P| sum_{r in P} R+(r) / R(r),     L_q = 1 - AP_q

    The j-th positive r of every anchor is handled in one (N, M) step of a loop over
    j < max |P|, which also accumulates the derivative
        d AP / d s_qb = sum_r G'_rb (c_r [b in P] - e_r [b in A]) - [b = r] sum_b' (...)
    with c_r = 1 / (|P| R(r)) and e_r = R+(r) / (|P| R(r)^2): |P| N work per anchor
    and (N, M) memory, with no N^3 tensor in graph mode or under XLA. Anchors without
    a positive give 0.
    """
    in_positive = keras.ops.cast(positive, "float32")
    retrieval = keras.ops.cast(keras.ops.logical_or(positive, negative), "float32")
    counts = keras.ops.sum(in_positive, axis=1)
    inverse_count = keras.ops.where(counts > 0, 1.0 / keras.ops.maximum(counts, 1.0), 0.0)
    order = keras.ops.cumsum(in_positive, axis=1) * in_positive  # the j-th positive has j + 1

    def add_slot(j, precision, derivative):
        at_r = keras.ops.cast(keras.ops.equal(order, keras.ops.cast(j + 1, "float32")),
                              "float32")  # one-hot r
        share = keras.ops.cast(counts > keras.ops.cast(j, "float32"), "float32") * inverse_count
        ranked = keras.ops.sum(matrix * at_r, axis=1, keepdims=True)  # s_qr, (N, 1)
        sig = keras.ops.sigmoid((matrix - ranked) / temperature) * (1.0 - at_r)  # b != r
        rank_positive = 1.0 + keras.ops.sum(sig * in_positive, axis=1)
        rank_all = 1.0 + keras.ops.sum(sig * retrieval, axis=1)
        c = share / rank_all
        e = share * rank_positive / keras.ops.square(rank_all)
        part = sig * (1.0 - sig) / temperature * (
            c[:, None] * in_positive - e[:, None] * retrieval)
        derivative += at_r * keras.ops.sum(part, axis=1, keepdims=True) - part
        return j + 1, precision + share * rank_positive / rank_all, derivative

    slots = keras.ops.cast(keras.ops.max(counts, initial=0.0), "int32")
    start = keras.ops.convert_to_tensor(0, "int32")
    _, precision, derivative = keras.ops.while_loop(
        lambda j, *_: j < slots, add_slot,
        (start, keras.ops.zeros_like(counts), keras.ops.zeros_like(matrix)))
    value = keras.ops.where(counts > 0, 1.0 - precision, 0.0)
    return value, derivative


@register(row_local=False)
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

    def __init__(self, temperature=0.01, include_anchor=True, *, miner=None,
                 reduction="sum_over_batch_size", name="smooth_ap", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.temperature = _hyper.positive("temperature", temperature)
        self.include_anchor = _hyper.boolean("include_anchor", include_anchor)

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        if self.include_anchor:
            diagonal = keras.ops.ones_like(keras.ops.diagonal(positive))
            positive = primitives.set_diagonal(positive, diagonal)
        return smooth_ap_terms(matrix, positive, negative, self.temperature)

    def get_config(self):
        config = super().get_config()
        config.pop("metric")
        config.update(temperature=self.temperature, include_anchor=self.include_anchor)
        return config
