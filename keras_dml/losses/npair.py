"""Multi-class N-pair loss (Sohn 2016) on any C x k batch, with its L2 penalty."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss, Reference
from keras_dml.losses.registry import register

__all__ = ["NPair"]

_TUPLES = ("all", "one_per_class")


def npair_terms(similarity, positive, negative):
    """Per-anchor N-pair value and its exact derivative w.r.t. the similarities.

    For anchor a with positives P_a and negatives N_a, every positive p defines
    one (N+1)-tuple (a, p, N_a) and its softmax cross entropy; the anchor's value
    is the mean over its positives:

        L_a = 1/|P_a| sum_{p in P_a} log(1 + sum_{n in N_a} exp(S_an - S_ap))
            = 1/|P_a| sum_{p in P_a} softplus(A_a - S_ap),  A_a = logsumexp_{N_a} S_an

    Derivatives (the pair weights, exact):

        dL_a/dS_ap = -1/|P_a| sigmoid(A_a - S_ap)
        dL_a/dS_an = +1/|P_a| (sum_p sigmoid(A_a - S_ap)) softmax_{N_a}(S_a)_n

    O(N^2): the sum over positives of the negatives' softmax factorises. An anchor
    without a positive or without a negative has value 0 and zero weights.
    """
    has_negative = keras.ops.any(negative, axis=1, keepdims=True)
    active = keras.ops.logical_and(positive, has_negative)
    count = keras.ops.sum(keras.ops.cast(active, "float32"), axis=1, keepdims=True)
    negative_lse = ops.masked_logsumexp(similarity, negative, keepdims=True)
    zeros = keras.ops.zeros_like(similarity)
    margin = keras.ops.where(active, negative_lse - similarity, zeros)
    per_pair = keras.ops.where(active, keras.ops.softplus(margin), zeros)
    value = keras.ops.divide_no_nan(keras.ops.sum(per_pair, axis=1, keepdims=True), count)
    pull = keras.ops.divide_no_nan(keras.ops.where(active, keras.ops.sigmoid(margin), zeros),
                                   count)
    softmax = keras.ops.where(negative, keras.ops.exp(similarity - negative_lse), zeros)  # <= 1
    push = keras.ops.sum(pull, axis=1, keepdims=True) * softmax
    return keras.ops.squeeze(value, axis=1), push - pull


@register()
class NPair(PairLoss):
    """Multi-class N-pair loss (Sohn 2016) with the L2 penalty on the embeddings.

    Weighted contrastive paper eq. 2: for a tuple t = (i, j, k_1, ..., k_{n-1}) of
    an anchor i, one positive j and negatives k_l,

        l(t) = -log( exp(S_ij) / (exp(S_ij) + sum_l exp(S_ik_l)) ),

    S the dot product. Every anchor a and each of its positives p form one tuple
    (a, p, N_a) with ALL of a's in-batch negatives N_a (one positive per term, as in
    N-pair-mc). The anchor's value is the mean over its positives, and

        L = 1/N sum_a [ 1/|P_a| sum_{p in P_a} l(a, p, N_a) + l2_penalty ||f_a||^2 ],

    on a C x k batch (any k >= 2) exactly eq. 2's mean over all N (k - 1) tuples.

    `tuples="one_per_class"` is Sohn's N-pair-mc to the letter (and
    pytorch-metric-learning's `NPairsLoss`): every class with two or more samples
    gives one pair, its first two samples in batch order (anchor a_c, positive
    p_c); the negatives of a_c are the other classes' positives, and the pair term
    is the mean over the C pairs of -log softmax_c(S_{a_c p_1}, ..., S_{a_c p_C}).
    It costs a C x C matrix instead of N x N, and uses 1/k of the batch's
    anchors; the penalty still covers every embedding. (With `tuples="all"` and
    k = 2, both members of a pair are anchors and a's negatives are both members of
    every other class.) Anchors without a positive or a negative contribute only
    the penalty.

    Pair weights (`keras_dml.weighting.pair_weights`) are the exact derivatives of
    the pair term (see `npair_terms`); the penalty's gradient 2 l2_penalty f_a acts
    on the embeddings directly and is not a pair weight.

    Args:
        l2_penalty: lambda of the penalty lambda ||f_a||^2 averaged over the batch.
            Defaults to 0.002 (reg_lambda of TensorFlow's reference `npairs_loss`,
            whose penalty is half of this one for the same lambda).
        tuples: "all" (every anchor with each of its positives, all in-batch
            negatives) or "one_per_class" (N-pair-mc's one pair per class).
            Defaults to "all".
        metric: "dot" (Sohn: unnormalised inner products, which is why the penalty
            exists) or "cosine". Defaults to "dot".
        miner: optional `keras_dml.mining.Miner`. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.NPair(l2_penalty=0.002)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Sohn, "Improved Deep Metric Learning with Multi-class N-pair Loss
        Objective", NeurIPS 2016; Hong et al., "Deep Metric Learning via Weighted
        Contrastive Loss", eq. 2; MS supplementary section 2.
    """

    metrics = ("dot", "cosine")
    default_metric = "dot"
    config_keys = PairLoss.config_keys + ("l2_penalty", "tuples")

    def __init__(self, l2_penalty=0.002, tuples="all", *, metric="dot", miner=None,
                 reduction="sum_over_batch_size", name="npair", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.l2_penalty = _hyper.non_negative("l2_penalty", l2_penalty)
        self.tuples = _hyper.one_of("NPair tuples", tuples, _TUPLES)

    def default_reference(self, labels, embeddings):
        if self.tuples == "all":
            return super().default_reference(labels, embeddings)
        # N-pair-mc: each class's first sample queries the classes' second samples.
        # Padded slots (static shapes: JAX, XLA) get labels -1 / -2: they form no pair.
        padded = primitives.static_shapes()
        anchors, positives, valid = ops.first_pair_per_class(labels, padded=padded)
        return Reference(keras.ops.where(valid, keras.ops.take(labels, positives), -2),
                         embeddings, trainable=True, rows=positives,
                         query_rows=keras.ops.where(valid, anchors, -1) if padded else anchors)

    def compute_terms(self, matrix, pairs):
        value, weights = npair_terms(matrix, pairs.positive, pairs.negative)
        if self.tuples == "all":
            return value, weights
        # N-pair-mc: the mean over the C pairs, one scalar for the batch
        pairs_count = keras.ops.sum(keras.ops.cast(pairs.reference_labels >= 0, "float32"))
        scale = keras.ops.divide_no_nan(1.0, pairs_count)
        return keras.ops.sum(value) * scale, weights * scale

    def penalty(self, labels, embeddings):
        """l2_penalty ||f_a||^2 of every sample (N,)."""
        if self.l2_penalty == 0.0:
            return None
        return self.l2_penalty * keras.ops.sum(keras.ops.square(embeddings), axis=1)
