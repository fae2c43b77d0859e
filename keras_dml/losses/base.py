"""`PairLoss`: the thin Keras layer over the pair-weighting engine.

A subclass states its hyperparameters and one method, `compute_terms(matrix,
positive, negative) -> (value, weights)`; everything else (validation, float32
inside mixed precision, the similarity matrix, masks, mining, the custom gradient,
serialization) lives here once.
"""

import collections

import keras
import tensorflow as tf

from keras_dml import mining, ops, validation
from keras_dml.weighting import weighted_pair_loss

PairTerms = collections.namedtuple(
    "PairTerms", ["value", "weights", "positive", "negative", "is_distance"]
)


class CheckedLoss(keras.losses.Loss):
    """A Loss on the engine that checks (labels, embeddings) before Keras sees them.

    Bad input is a ValueError naming it; an empty batch has no pair, so its loss is
    0 (shape (0,) unreduced) with a zero gradient. Subclasses define `validate`,
    `check_inputs`, `pair_matrix` and `pair_terms`.
    """

    def check_inputs(self, y_true, y_pred):
        """Checked (labels, embeddings); a subclass states what it accepts."""
        raise NotImplementedError

    def pair_terms_for_batch(self, labels, embeddings):
        """The engine's `PairTerms` of one batch (what `weighting.pair_weights` reads)."""
        labels, embeddings = self.validate(labels, embeddings)
        return self.pair_terms(self.pair_matrix(ops.to_float32(embeddings)), labels)

    def __call__(self, y_true, y_pred, sample_weight=None):
        _, embeddings = self.check_inputs(y_true, y_pred)
        if embeddings.shape[0] == 0:
            empty = tf.reduce_sum(ops.to_float32(embeddings), axis=1) * 0.0
            return empty if self.reduction in (None, "none") else tf.reduce_sum(empty)
        value = super().__call__(y_true, y_pred, sample_weight=sample_weight)
        return validation.check_no_overflow(value, embeddings, type(self).__name__)


class PairLoss(CheckedLoss):
    """Base class of the losses computed from an in-batch query x key matrix.

    `call(y_true, y_pred)` takes integer class labels (N,) or (N, 1) and
    embeddings (N, d), and returns one value per anchor; Keras' reduction
    (mean over the batch by default) and `sample_weight` apply on top.

    Args:
        metric: "cosine", "dot", "euclidean" or "squared_euclidean".
        miner: a `keras_dml.mining.Miner` choosing the pairs the loss sees, or None.
        reduction, name, dtype: as for `keras.losses.Loss`.
    """

    default_metric = "cosine"

    def __init__(self, metric=None, miner=None, reduction="sum_over_batch_size", name=None,
                 dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.metric = metric or self.default_metric
        ops.check_metric(self.metric)
        self.miner = mining.get(miner)

    # -- the part a subclass writes -------------------------------------------------
    def compute_terms(self, matrix, positive, negative):
        """Return (value per anchor (N,) or scalar, weights = d value / d matrix)."""
        raise NotImplementedError

    # -- shared machinery -------------------------------------------------------------
    @property
    def is_distance(self):
        return ops.is_distance(self.metric)

    def validate(self, labels, embeddings):
        return validation.check_labels_and_embeddings(labels, embeddings)

    def pair_matrix(self, embeddings):
        return ops.pairwise(embeddings, metric=self.metric)

    def pair_masks(self, matrix, labels):
        return self.mine(matrix, *ops.label_masks(labels))

    def mine(self, matrix, positive, negative):
        """The pairs the miner keeps (all of them without a miner)."""
        if self.miner is None:
            return positive, negative
        similarity = -matrix if self.is_distance else matrix
        return self.miner(similarity, positive, negative)

    def pair_terms(self, matrix, labels):
        positive, negative = self.pair_masks(matrix, labels)
        value, weights = self.compute_terms(matrix, positive, negative)
        return PairTerms(value, weights, positive, negative, self.is_distance)

    def check_inputs(self, y_true, y_pred):
        return validation.check_labels_and_embeddings(y_true, y_pred)

    def call(self, y_true, y_pred):
        labels = validation.check_class_labels(y_true)
        matrix = self.pair_matrix(ops.to_float32(y_pred))
        positive, negative = self.pair_masks(matrix, labels)
        return weighted_pair_loss(
            matrix, lambda m: self.compute_terms(m, positive, negative)
        )

    def get_config(self):
        config = super().get_config()
        config.update(metric=self.metric, miner=mining.serialize(self.miner))
        return config
