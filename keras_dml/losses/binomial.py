"""Binomial deviance loss and BinLifted, its direct combination with lifted structure."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["BinLifted", "BinomialDeviance"]


class _ScaledPairLoss(PairLoss):
    """Shared constructor of the losses with scales alpha, beta and threshold base."""

    metrics = ("cosine", "dot")
    config_keys = PairLoss.config_keys + ("alpha", "beta", "base")

    def __init__(self, alpha, beta, base, *, metric, miner, reduction, name, dtype):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.alpha = _hyper.positive("alpha", alpha)
        self.beta = _hyper.positive("beta", beta)
        self.base = _hyper.finite("base", base)

    def binomial_parts(self, matrix, pairs):
        """Per pair: softplus terms (1/alpha) log(1 + e^{alpha(base - S)}), ... and sigmoids."""
        positive, negative = pairs.positive, pairs.negative
        pull = self.alpha * (self.base - matrix)
        push = self.beta * (matrix - self.base)
        values = (keras.ops.where(positive, keras.ops.softplus(pull) / self.alpha, 0.0),
                  keras.ops.where(negative, keras.ops.softplus(push) / self.beta, 0.0))
        slopes = (keras.ops.where(positive, keras.ops.sigmoid(pull), 0.0),
                  keras.ops.where(negative, keras.ops.sigmoid(push), 0.0))
        return values, slopes


@register()
class BinomialDeviance(_ScaledPairLoss):
    """Binomial deviance loss (Yi et al. 2014; unified view eq. 12-14).

    On cosine similarities S, for each anchor i (eq. 12):

        L_i = 1/(alpha |P_i|) sum_{k in P_i} log(1 + exp(alpha (base - S_ik)))
            + 1/(beta  |N_i|) sum_{k in N_i} log(1 + exp(beta  (S_ik - base)))

    and the batch loss is the mean over anchors. Its pair weights are the exact
    derivatives (eq. 13-14): w_ij = sigmoid(alpha (base - S_ij)) / |P_i| for
    positives and sigmoid(beta (S_ij - base)) / |N_i| for negatives. Empty sets
    contribute 0.

    Fidelity: the printed eq. 12 lacks the 1/alpha and 1/beta (its derivatives would
    be alpha and beta times eq. 13-14); this loss follows eq. 13-14, as the authors'
    code does, which scales the negative term by alpha / beta = 0.04.

    Args:
        alpha: positive scale. Defaults to 2.0.
        beta: negative scale. Defaults to 50.0.
        base: the soft threshold lambda. Defaults to 0.5.
        metric: "cosine" or "dot". Defaults to "cosine".
        miner: optional `keras_dml.mining.Miner` (e.g. `MultiSimilarityMiner()`
            gives the unified view's "Binomial+VTHM").

    Defaults are the unified view's section 6.

    Examples:

    >>> loss = keras_dml.losses.BinomialDeviance(alpha=2.0, beta=50.0, base=0.5)

    Reference:
        Yi, Lei, Liao, Li, "Deep Metric Learning for Person Re-identification",
        ICPR 2014; unified view eq. 12-14.
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    def __init__(self, alpha=2.0, beta=50.0, base=0.5, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="binomial_deviance", dtype=None):
        super().__init__(alpha, beta, base, metric=metric, miner=miner, reduction=reduction,
                         name=name, dtype=dtype)

    def compute_terms(self, matrix, pairs):
        (pull, push), (pull_slope, push_slope) = self.binomial_parts(matrix, pairs)
        positives = keras.ops.sum(keras.ops.cast(pairs.positive, "float32"), axis=1,
                                  keepdims=True)
        negatives = keras.ops.sum(keras.ops.cast(pairs.negative, "float32"), axis=1,
                                  keepdims=True)
        value = keras.ops.sum(keras.ops.divide_no_nan(pull, positives)
                              + keras.ops.divide_no_nan(push, negatives), axis=1)
        weights = (keras.ops.divide_no_nan(push_slope, negatives)
                   - keras.ops.divide_no_nan(pull_slope, positives))
        return value, weights


@register()
class BinLifted(_ScaledPairLoss):
    """BinLifted: the direct average of binomial deviance and lifted structure weights.

    The baseline the multi-similarity paper beats (MS supplementary eq. 10): a
    negative pair's weight is

        w_ij = 1/2 ( sigmoid(beta (S_ij - base)) + exp(beta S_ij) / sum_{k in N_i} exp(beta S_ik) )

    and, analogously, a positive pair's is 1/2 (sigmoid(alpha (base - S_ij)) +
    exp(-alpha S_ij) / sum_{k in P_i} exp(-alpha S_ik)). They are the exact
    derivatives of, per anchor i,

        L_i = 1/2 [ sum_{P_i} (1/alpha) log(1 + e^{alpha (base - S_ik)})
                  + sum_{N_i} (1/beta) log(1 + e^{beta (S_ik - base)})
                  + (1/alpha) log sum_{P_i} e^{-alpha S_ik}
                  + (1/beta) log sum_{N_i} e^{beta S_ik} ],

    and the batch loss is the mean over anchors. Unlike `BinomialDeviance`, the
    binomial part is not divided by |P_i|, |N_i| (eq. 10 as written).

    Args:
        alpha: positive scale. Defaults to 2.0.
        beta: negative scale. Defaults to 50.0.
        base: the threshold lambda. Defaults to 0.5.
        metric: "cosine" or "dot". Defaults to "cosine".
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.BinLifted()

    Reference:
        Wang et al., "Multi-Similarity Loss with General Pair Weighting",
        CVPR 2019, supplementary eq. 10-11.
    """

    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    def __init__(self, alpha=2.0, beta=50.0, base=0.5, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="bin_lifted", dtype=None):
        super().__init__(alpha, beta, base, metric=metric, miner=miner, reduction=reduction,
                         name=name, dtype=dtype)

    def compute_terms(self, matrix, pairs):
        positive, negative = pairs.positive, pairs.negative
        (pull, push), (pull_slope, push_slope) = self.binomial_parts(matrix, pairs)
        lifted = (ops.masked_logsumexp(-self.alpha * matrix, positive) / self.alpha
                  + ops.masked_logsumexp(self.beta * matrix, negative) / self.beta)
        value = 0.5 * (keras.ops.sum(pull + push, axis=1) + lifted)
        weights = 0.5 * (push_slope + ops.masked_softmax(self.beta * matrix, negative)
                         - pull_slope - ops.masked_softmax(-self.alpha * matrix, positive))
        return value, weights
