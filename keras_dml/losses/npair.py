"""Multi-class N-pair loss (Sohn 2016) on any C x k batch, with its L2 penalty."""

import keras
import tensorflow as tf

from keras_dml import ops, validation
from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss, PairTerms
from keras_dml.weighting import weighted_pair_loss

_METRICS = ("dot", "cosine")
_TUPLES = ("all", "one_per_class")
_MASKED_LOGIT = -1e9  # a padding column's logit: exp underflows to exactly 0


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
    has_negative = tf.reduce_any(negative, axis=1, keepdims=True)
    active = tf.logical_and(positive, has_negative)
    count = tf.reduce_sum(tf.cast(active, tf.float32), axis=1, keepdims=True)
    negative_lse = ops.masked_logsumexp(similarity, negative, keepdims=True)
    margin = tf.where(active, negative_lse - similarity, tf.zeros_like(similarity))
    zeros = tf.zeros_like(similarity)
    per_pair = tf.where(active, tf.math.softplus(margin), zeros)
    value = tf.math.divide_no_nan(tf.reduce_sum(per_pair, axis=1, keepdims=True), count)
    pull = tf.math.divide_no_nan(tf.where(active, tf.sigmoid(margin), zeros), count)
    softmax = tf.where(negative, tf.exp(similarity - negative_lse), zeros)  # <= 1
    push = tf.reduce_sum(pull, axis=1, keepdims=True) * softmax
    return tf.squeeze(value, axis=1), push - pull


@keras.saving.register_keras_serializable(package="keras_dml")
class NPair(PairLoss):
    """Multi-class N-pair loss (Sohn 2016) with the L2 penalty on the embeddings.

    Weighted contrastive paper eq. 2: for a tuple t = (i, j, k_1, ..., k_{n-1}) of
    an anchor i, one positive j and negatives k_l,

        l(t) = -log( exp(S_ij) / (exp(S_ij) + sum_l exp(S_ik_l)) ),

    S the dot product. On a C x k batch (any k >= 2), every anchor a and every one
    of its k - 1 positives p form one tuple (a, p, N_a) with ALL of a's in-batch
    negatives N_a: one positive per term, as in N-pair-mc. The anchor's value is
    the mean over its positives (so every anchor weighs the same whatever k), and

        L = 1/N sum_a [ 1/|P_a| sum_{p in P_a} l(a, p, N_a) + l2_penalty ||f_a||^2 ].

    On a C x k batch every anchor has k - 1 positives, so the pair term is exactly
    eq. 2's mean over all N (k - 1) tuples.

    `tuples="one_per_class"` is Sohn's N-pair-mc to the letter (and
    pytorch-metric-learning's `NPairsLoss`): every class with two or more samples
    gives one pair, its first two samples in batch order (anchor a_c, positive
    p_c); the negatives of a_c are the other classes' positives, and the pair term
    is the mean over the C pairs of -log softmax_c(S_{a_c p_1}, ..., S_{a_c p_C}).
    It costs a C x C matrix instead of N x N, and uses 1/k of the batch's
    anchors; the penalty still covers every embedding.

    With k = 2 each anchor has exactly one positive, and both members of a pair
    serve as anchors; the negatives are both members of every other class (N-pair-mc
    uses only the other classes' positives, i.e. half of them). Anchors without a
    positive (a class with one sample) or without a negative contribute only the
    penalty.

    Pair weights (`keras_dml.weighting.pair_weights`) are the exact derivatives of
    the pair term (see `npair_terms`); the penalty's gradient 2 l2_penalty f_a acts
    on the embeddings directly and is not a pair weight.

    Args:
        l2_penalty: lambda of the penalty lambda ||f_a||^2 averaged over the batch.
            Defaults to 0.002 (the reg_lambda default of TensorFlow's reference
            `npairs_loss`, whose penalty 0.25 lambda (mean ||f_anchor||^2 +
            mean ||f_positive||^2) is half of this one for the same lambda).
        metric: "dot" (Sohn: unnormalised inner products, which is why the penalty
            exists) or "cosine". Defaults to "dot".
        miner: optional `keras_dml.mining.Miner`. Defaults to None.
        tuples: "all" (every anchor with each of its positives, all in-batch
            negatives) or "one_per_class" (N-pair-mc's one pair per class).
            Defaults to "all".

    Examples:

    >>> loss = keras_dml.losses.NPair(l2_penalty=0.002)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Sohn, "Improved Deep Metric Learning with Multi-class N-pair Loss
        Objective", NeurIPS 2016; Hong et al., "Deep Metric Learning via Weighted
        Contrastive Loss", eq. 2; MS supplementary section 2.
    """

    def __init__(self, l2_penalty=0.002, metric="dot", miner=None, tuples="all",
                 reduction="sum_over_batch_size", name="npair", dtype=None):
        _hyper.one_of("NPair metric", metric, _METRICS)
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.l2_penalty = _hyper.non_negative("l2_penalty", l2_penalty)
        self.tuples = _hyper.one_of("NPair tuples", tuples, _TUPLES)

    def compute_terms(self, matrix, positive, negative):
        return npair_terms(matrix, positive, negative)

    def pair_terms(self, matrix, labels):
        if self.tuples == "all":
            return super().pair_terms(matrix, labels)
        # The N x N view of one_per_class (for pair_weights): anchor rows, positive columns,
        # and the mean over the C pairs, not over all N rows.
        anchors, positives, valid = ops.first_pair_per_class(labels, padded=True)
        n = tf.shape(labels)[0]
        rows, columns = tf.where(valid, anchors, n), tf.where(valid, positives, n)
        index = tf.stack(tf.meshgrid(rows, columns, indexing="ij"), axis=-1)
        same = tf.eye(tf.shape(rows)[0], dtype=tf.int32)
        positive = tf.scatter_nd(index, same, [n + 1, n + 1])[:n, :n] > 0
        negative = tf.scatter_nd(index, 1 - same, [n + 1, n + 1])[:n, :n] > 0
        positive, negative = self.mine(matrix, positive, negative)
        value, weights = self.compute_terms(matrix, positive, negative)
        scale = _rows_per_pair(valid, n)
        return PairTerms(value * scale, weights * scale, positive, negative, self.is_distance)

    def __call__(self, y_true, y_pred, sample_weight=None):
        if not self._is_mean_over_pairs(y_pred, sample_weight):
            return super().__call__(y_true, y_pred, sample_weight=sample_weight)
        # The same value as the per-sample path's mean, without its scatter to N rows
        # and Keras' reduction: on N-pair-mc's small C x C problem they cost ~15%.
        with tf.name_scope(self.name):
            labels, embeddings = self.check_inputs(y_true, y_pred)
            _, losses, valid = self._pair_losses(labels, embeddings)
            value = tf.math.divide_no_nan(tf.reduce_sum(losses), _pair_count(valid))
            if self.l2_penalty != 0.0:
                penalties = self._penalties(embeddings)
                value += tf.math.divide_no_nan(tf.reduce_sum(penalties),
                                               tf.cast(tf.size(penalties), tf.float32))
            return tf.cast(value, self.dtype)

    def _is_mean_over_pairs(self, y_pred, sample_weight):
        """One pair per class, the default reduction, no sample weight, no Keras mask."""
        return (self.tuples == "one_per_class" and sample_weight is None
                and self.reduction == "sum_over_batch_size"
                and getattr(y_pred, "_keras_mask", None) is None)

    def call(self, y_true, y_pred):
        if self.tuples == "all":
            value = super().call(y_true, y_pred)
        else:
            value = self._one_pair_per_class(y_true, y_pred)
        if self.l2_penalty == 0.0:
            return value
        return value + self._penalties(y_pred)

    def _penalties(self, embeddings):
        """l2_penalty ||f_a||^2 of every sample (N,)."""
        return self.l2_penalty * tf.reduce_sum(tf.square(ops.to_float32(embeddings)), axis=1)

    def _one_pair_per_class(self, y_true, y_pred):
        """Per-sample values from the C x C matrix only: anchor a_c carries its tuple's
        loss, scaled so that the batch mean is the mean over the C pairs."""
        labels = validation.check_class_labels(y_true)
        anchors, losses, valid = self._pair_losses(labels, y_pred)
        n = tf.shape(labels)[0]
        per_sample = tf.scatter_nd(anchors[:, tf.newaxis], losses, [n])  # anchors are distinct
        return per_sample * _rows_per_pair(valid, n)

    def _pair_losses(self, labels, y_pred):
        """(anchors, N-pair-mc loss of each pair, valid): 0 in padding slots."""
        padded = ops.in_xla_context()  # static shapes under XLA, exactly C pairs otherwise
        anchors, positives, valid = ops.first_pair_per_class(labels, padded=padded)
        pairs = tf.shape(anchors)[0]
        matrix = ops.similarities_between_rows(y_pred, anchors, positives, metric=self.metric)
        if self.miner is None:
            # All pairs kept: row c is a softmax cross entropy with target c, one fused
            # op whose gradient softmax - onehot is exactly npair_terms' weights. A
            # masked column keeps it defined when there is no pair (C = 0).
            logits = tf.where(valid[tf.newaxis, :], matrix, _MASKED_LOGIT) if padded else matrix
            logits = tf.pad(logits, [[0, 0], [0, 1]], constant_values=_MASKED_LOGIT)
            losses = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.range(pairs), logits)
        else:
            both = tf.logical_and(valid[:, tf.newaxis], valid[tf.newaxis, :])
            same = tf.eye(pairs, dtype=tf.bool)
            positive, negative = self.mine(matrix, tf.logical_and(both, same),
                                           tf.logical_and(both, ~same))
            losses = weighted_pair_loss(matrix, lambda m: npair_terms(m, positive, negative))
        if padded:
            losses = tf.where(valid, losses, 0.0)
        return anchors, losses, valid

    def get_config(self):
        config = super().get_config()
        config.update(l2_penalty=self.l2_penalty, tuples=self.tuples)
        return config


def _pair_count(valid):
    """C, the number of slots that hold a pair, as a float."""
    return tf.reduce_sum(tf.cast(valid, tf.float32))


def _rows_per_pair(valid, n):
    """N / C: turns a mean over N rows into a mean over the C pairs (0 if C = 0)."""
    return tf.math.divide_no_nan(tf.cast(n, tf.float32), _pair_count(valid))
