"""Multi-similarity loss, i.e. relative and absolute weighting (RAW) with VTHM."""

import warnings

from keras_dml import ops
from keras_dml import hyperparameters as _hyper
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register
from keras_dml.mining import MultiSimilarityMiner

__all__ = ["MultiSimilarity", "RelativeAbsoluteWeighting"]


@register()
class MultiSimilarity(PairLoss):
    """Multi-similarity loss (Wang et al. CVPR 2019), the RAW loss of the unified view.

    On cosine similarities S, for each anchor i with (mined) positives P_i and
    negatives N_i (unified view eq. 17):

        L_i = 1/alpha * log(1 + sum_{k in P_i} exp(-alpha (S_ik - base)))
            + 1/beta  * log(1 + sum_{k in N_i} exp( beta (S_ik - base)))

    and the batch loss is the mean over anchors, L = (1/m) sum_i L_i. Its pair
    weights are the exact derivatives (unified view eq. 15-16; MS supplementary
    eq. 12):

        w_ij = exp(-alpha (S_ij - base)) / (1 + sum_{k in P_i} exp(-alpha (S_ik - base)))
        w_ij = exp( beta (S_ij - base)) / (1 + sum_{k in N_i} exp( beta (S_ik - base)))

    for positives and negatives respectively (times 1/m). By default pairs are
    first selected by valid-triplet hard mining (`MultiSimilarityMiner`, unified
    view section 5.1). An anchor with no kept pair contributes 0.

    Args:
        alpha: positive scale. Defaults to 2.0.
        beta: negative scale. Defaults to 50.0.
        base: the similarity threshold lambda. Defaults to 0.5.
        metric: pair similarity. Defaults to "cosine".
        miner: a miner or its registered name; None keeps every pair. Defaults to
            "MultiSimilarityMiner" (VTHM with epsilon = 0.1). The older spellings
            `mining=False` (no miner) and `epsilon=e` (`MultiSimilarityMiner(e)`)
            still work, with a DeprecationWarning.

    Defaults are the unified view's section 6 (and the MS paper's).

    Examples:

    >>> loss = keras_dml.losses.MultiSimilarity()
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Wang et al., "Multi-Similarity Loss with General Pair Weighting for Deep
        Metric Learning", CVPR 2019 (the unified view, ICLR 2019 submission).
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    config_keys = PairLoss.config_keys + ("alpha", "beta", "base")
    unsaved_keys = ("mining", "epsilon")  # deprecated spellings of `miner`

    def __init__(self, alpha=2.0, beta=50.0, base=0.5, *, metric="cosine",
                 miner="MultiSimilarityMiner", reduction="sum_over_batch_size",
                 name="multi_similarity", dtype=None, mining=None, epsilon=None):
        self.alpha = _hyper.positive("alpha", alpha)
        self.beta = _hyper.positive("beta", beta)
        self.base = _hyper.finite("base", base)
        if mining is not None or epsilon is not None:
            warnings.warn(_hyper.deprecation("MultiSimilarity(mining=, epsilon=)", "pass "
                                             "miner=None or miner=MultiSimilarityMiner(epsilon)"),
                          DeprecationWarning, stacklevel=2)
            miner = None if mining is False else (
                MultiSimilarityMiner(0.1 if epsilon is None else epsilon)
                if miner == "MultiSimilarityMiner" else miner)
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)

    def compute_terms(self, matrix, pairs):
        pull = -self.alpha * (matrix - self.base)
        pull_lse, pull_weights = ops.masked_logsumexp_and_softmax(pull, pairs.positive,
                                                                  include_zero=True)
        # the negatives' side once the positives' is done: two (N, M) matrices at a time
        with primitives.control_dependencies([pull_weights]):
            push = self.beta * (matrix - self.base)
        push_lse, push_weights = ops.masked_logsumexp_and_softmax(push, pairs.negative,
                                                                  include_zero=True)
        return pull_lse / self.alpha + push_lse / self.beta, push_weights - pull_weights


@register()
class RelativeAbsoluteWeighting(MultiSimilarity):
    """Relative and absolute weighting (RAW) with VTHM: the unified view's name for MS.

    The unified view (section 5, eq. 15-17) derives RAW weighting with valid
    triplet hard mining; the loss of eq. 17 with VTHM is, term for term, the
    multi-similarity loss, so this class is `MultiSimilarity` under a second name
    (same arguments, defaults, weights and value).

    Examples:

    >>> loss = keras_dml.losses.RelativeAbsoluteWeighting(alpha=2.0, beta=50.0, base=0.5)

    Reference:
        "A Unified View of Pair-based Deep Metric Learning" (ICLR 2019
        submission), eq. 15-17 and section 5.1.
    """

    def __init__(self, alpha=2.0, beta=50.0, base=0.5, *, metric="cosine",
                 miner="MultiSimilarityMiner", reduction="sum_over_batch_size",
                 name="relative_absolute_weighting", dtype=None, mining=None, epsilon=None):
        super().__init__(alpha=alpha, beta=beta, base=base, miner=miner, metric=metric,
                         reduction=reduction, name=name, dtype=dtype, mining=mining,
                         epsilon=epsilon)
