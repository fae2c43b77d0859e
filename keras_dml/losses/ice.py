"""Instance cross entropy (ICE) with the paper's normalised gradient reweighting."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["InstanceCrossEntropy"]

_FLOAT32_MIN = float(ops.FLOAT32_MIN)


def instance_cross_entropy_terms(similarity, positive, negative, scale):
    """Per-anchor ICE value (eq. 5) and the reweighted pair gradients (eq. 13-14).

    With logits z = scale * S and, for each anchor a, the negatives' log-sum-exp
    l_a = log sum_{j in N(a)} exp(z_aj), every positive i of a has the margin
    x_ai = l_a - z_ai, and

        -log p^(i|a) = softplus(x_ai)            (eq. 3 on the scaled logits)
        1 - p^(i|a)  = sigmoid(x_ai)             (no cancellation at large s)
        p^(j|a,i)    = q_aj * (1 - p^(i|a)),     q_aj = softmax_{N(a)}(z_a)_j

    The last line factorises the sum over positives in eq. 14: the negative
    weight of j is (1 / 2N) q_aj, whatever the positives are. The positive weights
    of eq. 13 are a softmax over the positives of log sigmoid(x_ai), exact even
    when every 1 - p^ underflows.

    Returns (value (N,) = sum_{i in P(a)} -log p^(i|a), weights (N, M)):
    -1/2 (1 - p^(i|a)) / sum_{i'} (1 - p^(i'|a)) on positives and +1/2 q_aj on
    negatives, so that after Keras' mean over the N anchors dL/dS = -+ w_bar of
    eq. 13-14. Anchors without a positive or a negative get 0.
    """
    logits = scale * similarity
    has_negative = keras.ops.any(negative, axis=1, keepdims=True)
    has_positive = keras.ops.any(positive, axis=1, keepdims=True)
    # [matching distributions] one per (anchor, positive); empty without negatives.
    active = keras.ops.logical_and(positive, has_negative)
    negative_lse = ops.masked_logsumexp(logits, negative, keepdims=True)
    # x = l_a - z_a. on every entry (finite): the margin on the active positives, and
    # minus the negatives' log-softmax on the negatives. One (N, M) matrix for both, and
    # each step below waits for the previous one, so at most two are alive at a time.
    margin = negative_lse - logits
    # [loss] eq. 5, anchor by anchor.
    value = keras.ops.sum(keras.ops.where(active, keras.ops.softplus(margin), 0.0), 1)
    # [weighting] eq. 13: (1 - p^) / sum (1 - p^) = softmax of log(1 - p^) = log sigmoid.
    with primitives.control_dependencies([value]):
        positive_weights = ops.masked_softmax(keras.ops.log_sigmoid(margin), active)
    # eq. 14, factorised: sum_i p^(j|a,i) / sum_i (1 - p^(i|a)) = q_aj, the softmax of
    # the negatives (reusing their log-sum-exp); zero for anchors without a positive.
    keep = keras.ops.logical_and(negative, has_positive)
    with primitives.control_dependencies([positive_weights]):
        negative_weights = keras.ops.exp(keras.ops.where(keep, -margin, ops.FLOAT32_MIN))
    return value, 0.5 * (negative_weights - positive_weights)


@register(exact_weights=False)
class InstanceCrossEntropy(PairLoss):
    """Instance cross entropy (Wang et al. 2019) with its normalised sample reweighting.

    On cosine similarities S of L2-normalised embeddings, every anchor a and
    each of its positives i (same class, i != a) define one matching
    distribution over {i} and all the anchor's negatives N(a), on logits s * S
    (eq. 3, rescaled as in eq. 11):

        p^(i|a) = exp(s S_ai) / (exp(s S_ai) + sum_{j in N(a)} exp(s S_aj))

    and the loss is the cross entropy of all of them (eq. 5), averaged over the
    N anchors:

        L = (1/N) sum_a sum_{i in P(a)} -log p^(i|a)

    Weights are stated, not derived: the backward pass does not use the
    derivative of L. As in Algorithm 1 and eq. 15, the gradient magnitudes are
    replaced by the per-anchor normalised weights of eq. 13-14:

        dL/dS_ai = -(1/2N) (1 - p^(i|a)) / sum_{i' in P(a)} (1 - p^(i'|a))
        dL/dS_aj = +(1/2N) sum_{i in P(a)} p^(j|a,i) / sum_{i' in P(a)} (1 - p^(i'|a))

    so each anchor's positive weights and its negative weights both sum to
    1/(2N) (footnote 2): s changes the relative weights, not the total. The
    gradient reaches both embeddings of every pair through S and the L2
    normalisation by the chain rule. Anchors with no positive (a class with one
    sample in the batch, which still serves as a negative) or with no negative
    contribute 0. With two samples per class, eq. 16-17: every positive gets
    1/(2N) and negative j gets (1/2N) p^(j|a,i) / (1 - p^(i|a)).

    O(N^2) time and memory (eq. 14's sum over positives factorises); 1 - p^ comes
    from the negatives' log-sum-exp, so the weights stay exact at large s.

    Args:
        scale: the weight scaling parameter s (the paper's only hyperparameter;
            s >= 1 in the paper, any positive value accepted). Defaults to 64.0,
            the paper's best setting (Table 2).
        metric: "cosine" (embeddings are L2-normalised inside) or "dot" (for
            embeddings already on the unit sphere). Defaults to "cosine".
        miner: optional `keras_dml.mining.Miner` restricting the pairs. The
            paper uses none. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.InstanceCrossEntropy(scale=64.0)
    >>> model.compile(optimizer="adam", loss=loss)
    >>> # or by name: model.compile(optimizer="adam", loss="keras_dml>InstanceCrossEntropy")

    Reference:
        Wang, Kodirov, Hua, Robertson, "Instance Cross Entropy for Deep Metric
        Learning", 2019 (eq. 3-5, 11-17, Algorithm 1; Table 2 for s).
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    metrics = ("cosine", "dot")
    config_keys = PairLoss.config_keys + ("scale",)

    def __init__(self, scale=64.0, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="instance_cross_entropy", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.scale = _hyper.positive("scale", scale)

    def compute_terms(self, matrix, pairs):
        return instance_cross_entropy_terms(matrix, pairs.positive, pairs.negative, self.scale)
