"""Angular loss (Wang et al., ICCV 2017), N-pair form: a batch-global loss."""

import math

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["Angular"]


def _shifted_exps(x, mask):
    """exp(x - c) on `mask`, 0 elsewhere (never an exp of an unmasked entry), with c
    the row's largest masked entry (0 for an empty row)."""
    shift = keras.ops.stop_gradient(ops.masked_max(x, mask, axis=1, keepdims=True))
    exps = keras.ops.exp(keras.ops.where(mask, x - shift, 0.0))
    return keras.ops.where(mask, exps, 0.0), shift


def angular_terms(similarity, positive, negative, other_class, alpha):
    """Mean over positive pairs of the angular loss on cosine similarities, and d / d S.

    With t = tan^2(alpha), for a positive pair (a, p) and the anchor's negatives N_a:

        f_apn = 4 t (s_an + s_pn) - 2 (1 + t) s_ap
        L_ap  = log(1 + sum_{n in N_a} exp(f_apn)),   L = 1/|P| sum_{(a, p) in P} L_ap

    The sum over n is a matmul: with A_an = exp(4 t s_an - c_a) on N_a (c_a its
    largest term) and B_pn = exp(4 t s_pn - r_p) on the classes other than p's (they
    hold N_a, mined or not; r_p its largest term),
    sum_n exp(4 t (s_an + s_pn)) = (A B^T)_ap e^{c_a + r_p}. With
    R_ap = sigmoid(x_ap) / (|P| (A B^T)_ap), x_ap the softplus argument,

        dL/ds_an = 4 t A_an (R B)_an,   dL/ds_pn = 4 t B_pn (R^T A)_pn,
        dL/ds_ap = -2 (1 + t) sigmoid(x_ap) / |P|

    The second term sits on the positive's row: the loss is batch-global.
    """
    t = math.tan(alpha) ** 2
    scaled = 4.0 * t * similarity
    anchor_side, shift = _shifted_exps(scaled, negative)
    positive_side, row_shift = _shifted_exps(scaled, other_class)  # N_a lies in them
    inner = keras.ops.matmul(anchor_side, keras.ops.transpose(positive_side))
    kept = keras.ops.logical_and(positive, inner > 0.0)
    safe_inner = keras.ops.where(kept, inner, 1.0)
    logits = (keras.ops.log(safe_inner) + shift + keras.ops.transpose(row_shift)
              - 2.0 * (1.0 + t) * similarity)
    count = keras.ops.sum(keras.ops.cast(positive, "float32"))
    value = keras.ops.divide_no_nan(
        keras.ops.sum(keras.ops.where(kept, keras.ops.softplus(logits), 0.0)), count)
    share = keras.ops.divide_no_nan(keras.ops.where(kept, keras.ops.sigmoid(logits), 0.0), count)
    ratio = share / safe_inner
    weights = (4.0 * t * (anchor_side * keras.ops.matmul(ratio, positive_side)
                          + positive_side * keras.ops.matmul(keras.ops.transpose(ratio),
                                                             anchor_side))
               - 2.0 * (1.0 + t) * share)
    return value, weights


@register(reference="batch", row_local=False)
class Angular(PairLoss):
    """Angular loss (Wang, Zhou, Wen, Liu, Lin, ICCV 2017), its N-pair form.

    The angle at the negative of the triangle (anchor, positive, negative) is
    bounded by alpha (eq. 5); on L2-normalised embeddings and for a batch, with
    t = tan^2(alpha) and the negatives N_a of the anchor (eq. 8-9 of the arXiv
    version, 1708.01682):

        f_apn = 4 t (x_a + x_p)^T x_n - 2 (1 + t) x_a^T x_p
        L_ap  = log(1 + sum_{n in N_a} exp(f_apn))

    averaged over the (ordered) positive pairs, as pytorch-metric-learning 2.9's
    `AngularLoss` reduces it (the paper has one positive per anchor). f uses the
    positive's similarity to the negative, s_pn, a term on the positive's row: the
    value is batch-global (a scalar, W = d value / d S) and the reference set is the
    batch itself (a key's similarity to the other keys is not in an (N, M) matrix).

    Where keras_dml differs from PML: every embedding is L2-normalised (the
    paper's unit sphere), while PML normalises x_a and x_p but not x_n, so the two
    agree on unit-norm inputs (and PML on unit inputs equals this loss on raw ones,
    value and gradient), not on raw inputs to PML; and with a miner, N_a is the
    miner's kept negatives of the anchor (PML takes every sample of another class).

    Args:
        alpha: the angle bound, in degrees. Defaults to 40 (PML's default; the paper
            uses 36 to 55).
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.Angular(alpha=40)

    Reference:
        Wang, Zhou, Wen, Liu, Lin, "Deep Metric Learning with Angular Loss",
        ICCV 2017.
    """

    config_keys = ("miner", "alpha")

    def __init__(self, alpha=40.0, *, miner=None, reduction="sum_over_batch_size",
                 name="angular", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.alpha = _hyper.positive("alpha", alpha)
        if self.alpha >= 90.0:
            raise ValueError(f"alpha must be an angle in (0, 90) degrees, got {alpha!r}.")

    def check_reference(self, reference, embeddings):
        raise ValueError("Angular uses the positive's similarity to each negative: its "
                         "reference set is the batch itself, not an explicit one.")

    def compute_terms(self, matrix, pairs):
        other_class = keras.ops.not_equal(keras.ops.expand_dims(pairs.labels, 1),
                                          keras.ops.expand_dims(pairs.reference_labels, 0))
        return angular_terms(matrix, pairs.positive, pairs.negative, other_class,
                             math.radians(self.alpha))
