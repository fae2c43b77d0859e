"""PNP (Li et al. AAAI 2022): penalise only the negatives ranked before each positive."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.positive_slots import over_positive_slots
from keras_dml.losses.registry import register

__all__ = ["PNP"]

VARIANTS = ("Ds", "Dq", "Iu", "Ib", "O")


def _penalty(variant, count, b, alpha):
    """(f(R), f'(R)) of the variant on the soft counts R of negatives before a positive."""
    if variant == "Ds":
        return keras.ops.log1p(count), 1.0 / (1.0 + count)
    if variant == "Dq":  # the value is 1 - mean f
        power = keras.ops.power(1.0 + count, -alpha)
        return power, -alpha * power / (1.0 + count)
    if variant == "Iu":
        log = keras.ops.log1p(count)
        return (1.0 + count) * log, log + 1.0
    if variant == "Ib":
        return (b * count - keras.ops.log1p(b * count)) / b ** 2, count / (1.0 + b * count)
    return count, keras.ops.ones_like(count)


def pnp_terms(similarity, positive, negative, variant, b, alpha, temperature):
    """PNP per anchor and its exact derivative w.r.t. the similarities.

    For anchor a, each positive i of P'_a = P_a + {a} (the anchor itself, at
    similarity 1) counts the negatives before it, R_ai = sum_{j in N_a}
    sigmoid((s_aj - s_ai) / T); the value is mean_{i in P'_a} f(R_ai) (1 - that
    for "Dq"), so with c = +-1/|P'_a|:

        d / d s_aj = c sum_i f'(R_ai) g_aij         (j in N_a)
        d / d s_ai = -c f'(R_ai) sum_j g_aij        (i in P_a)

    g_aij = sigmoid'((s_aj - s_ai) / T) / T. One (N, M) step per positive slot
    (`over_positive_slots`, after the anchor's own term): no N^3 tensor.
    """
    in_negative = keras.ops.cast(negative, "float32")
    counts = keras.ops.sum(keras.ops.cast(positive, "float32"), axis=1)
    scale = (-1.0 if variant == "Dq" else 1.0) / (counts + 1.0)

    def before(ranked, share):
        """share * f(R) and the derivative's rows for positives at similarity `ranked`."""
        soft = keras.ops.sigmoid((similarity - ranked) / temperature)
        slope = soft * (1.0 - soft) / temperature * in_negative
        value, derivative = _penalty(variant, keras.ops.sum(soft * in_negative, axis=1),
                                     b, alpha)
        return share * value, (share * scale * derivative)[:, None] * slope

    def add_slot(at_i, share, total, weights):
        ranked = keras.ops.sum(similarity * at_i, axis=1, keepdims=True)  # s_ai, (N, 1)
        value, rows = before(ranked, share)
        weights += rows - at_i * keras.ops.sum(rows, axis=1, keepdims=True)
        return total + value, weights

    # the anchor first, at similarity 1 (a constant), then its positives
    total, weights = over_positive_slots(positive, add_slot, before(1.0, 1.0))
    value = total / (counts + 1.0)
    return (1.0 - value if variant == "Dq" else value), weights


@register()
class PNP(PairLoss):
    """PNP loss (Li, Xie, Yang, Ren, Zhang, AAAI 2022): "Only Penalizing Negative
    instances before Positive ones".

    For anchor a with positives P'_a (its same-class samples and, as in the authors'
    code and PML, the anchor itself at cosine similarity 1) and negatives N_a, each
    positive i counts the negatives ranked before it with a sigmoid of temperature
    T (the anneal):

        R_ai = sum_{j in N_a} sigmoid((s_aj - s_ai) / T)
        L_a  = 1/|P'_a| sum_{i in P'_a} f(R_ai)

    with the paper's variants of f: "O" f(R) = R (PNP-O); "Ds" log(1 + R)
    (PNP-D_s); "Dq" 1 - 1/|P'_a| sum (1 + R)^-alpha (PNP-D_q, the value being
    1 minus the mean); "Iu" (1 + R) log(1 + R) (PNP-I_u); "Ib"
    (b R - log(1 + b R)) / b^2 (PNP-I_b). The loss is the mean over anchors; its
    derivative is exact, computed one positive slot at a time (|P| N work per
    anchor, no N^3 tensor, where PML builds one).

    Equal to pytorch-metric-learning 2.9's `PNPLoss` (its defaults; it clamps
    sigmoid arguments to [-50, 50], which moves no float32 value), except that the
    anchor's own similarity is the constant 1 here (PML's computed s_aa is 1 up to
    rounding, and its gradient is 0), so the loss also takes an explicit reference
    set and a miner (PML takes neither).

    Args:
        b: the "Ib" variant's b. Defaults to 2.
        alpha: the "Dq" variant's exponent. Defaults to 1.
        anneal: the sigmoid's temperature T. Defaults to 0.01.
        variant: "O", "Ds", "Dq", "Iu" or "Ib". Defaults to "O" (PML's; the paper
            recommends "Dq").
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.PNP(variant="Dq", alpha=4.0)

    Reference:
        Li, Xie, Yang, Ren, Zhang, "Rethinking the Optimization of Average
        Precision: Only Penalizing Negative Instances before Positive Ones is
        Enough", AAAI 2022.
    """

    config_keys = ("miner", "b", "alpha", "anneal", "variant")

    def __init__(self, b=2.0, alpha=1.0, anneal=0.01, variant="O", *, miner=None,
                 reduction="sum_over_batch_size", name="pnp", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.b = _hyper.positive("b", b)
        self.alpha = _hyper.positive("alpha", alpha)
        self.anneal = _hyper.positive("anneal", anneal)
        self.variant = _hyper.one_of("variant", variant, VARIANTS)

    def compute_terms(self, matrix, pairs):
        return pnp_terms(matrix, pairs.positive, pairs.negative, self.variant, self.b,
                         self.alpha, self.anneal)

