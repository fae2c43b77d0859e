"""Threshold-Consistent Margin loss (Zhang et al. ICLR 2024): a batch-global pair
regulariser that pulls positives above one cosine margin and pushes negatives below
another."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["ThresholdConsistentMargin"]


def _hinge_mean(excess, pairs):
    """Mean of `excess` over the pairs where it is >= 0, and its derivative (N, M)."""
    active = keras.ops.logical_and(pairs, excess >= 0.0)
    count = keras.ops.sum(keras.ops.cast(active, "float32"))
    share = keras.ops.divide_no_nan(1.0, count)
    value = keras.ops.sum(keras.ops.where(active, excess, 0.0)) * share
    return value, keras.ops.cast(active, "float32") * share


@register(row_local=False)
class ThresholdConsistentMargin(PairLoss):
    """Threshold-Consistent Margin (TCM) loss (Zhang et al., ICLR 2024: the TCM
    regulariser).

    With S the cosine similarities of the kept positive pairs P and negative pairs N
    (ordered pairs (a, b), a != b, of the batch),

        L = lambda+ sum_{P} (m+ - S) 1[S <= m+] / sum_{P} 1[S <= m+]
          + lambda- sum_{N} (S - m-) 1[S >= m-] / sum_{N} 1[S >= m-]

    a term being 0 when no pair is past its margin. The value is batch-global (one
    scalar, an average over pairs, not over anchors): W = dL/dS is -lambda+ /
    count+ on each positive pair below m+, lambda- / count- on each negative pair
    above m-, 0 elsewhere. The paper adds TCM to a base loss (`Combined`, e.g.
    with `SmoothAP` or `ProxyAnchor`); alone it is a hinge on hard pairs.

    Equal to pytorch-metric-learning 2.9's `ThresholdConsistentMarginLoss` (the
    same defaults, value and gradient), which also takes a pair miner.

    Args:
        lambda_plus: weight of the positive term. Defaults to 1.0.
        lambda_minus: weight of the negative term. Defaults to 1.0.
        margin_plus: m+, the similarity positives are pulled above. Defaults to 0.9.
        margin_minus: m-, the similarity negatives are pushed below. Defaults to 0.5.
        miner: optional `keras_dml.mining.Miner` (keeps some of the pairs).

    Examples:

    >>> base = keras_dml.losses.MultiSimilarity()
    >>> loss = keras_dml.losses.Combined([base, keras_dml.losses.ThresholdConsistentMargin()])

    Reference:
        Zhang, Xu, Tang, Fang, Wu, Tighe, Xing, "Threshold-Consistent Margin Loss for
        Open-World Deep Metric Learning", ICLR 2024 (arXiv:2307.04047).
    """

    config_keys = ("miner", "lambda_plus", "lambda_minus", "margin_plus", "margin_minus")

    def __init__(self, lambda_plus=1.0, lambda_minus=1.0, margin_plus=0.9, margin_minus=0.5,
                 *, miner=None, reduction="sum_over_batch_size",
                 name="threshold_consistent_margin", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.lambda_plus = _hyper.non_negative("lambda_plus", lambda_plus)
        self.lambda_minus = _hyper.non_negative("lambda_minus", lambda_minus)
        self.margin_plus = _hyper.finite("margin_plus", margin_plus)
        self.margin_minus = _hyper.finite("margin_minus", margin_minus)

    def compute_terms(self, matrix, pairs):
        pull, pull_weights = _hinge_mean(self.margin_plus - matrix, pairs.positive)
        push, push_weights = _hinge_mean(matrix - self.margin_minus, pairs.negative)
        value = self.lambda_plus * pull + self.lambda_minus * push
        return value, self.lambda_minus * push_weights - self.lambda_plus * pull_weights
