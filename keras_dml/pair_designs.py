"""Batch designs of the weighted contrastive paper and their importance weights.

A batch design is a way of drawing pairs; it induces a distribution Q over
ordered pairs (eq. 8-9). Weighting each sampled pair by
W_ij = P_U(i, j) / Q(i, j), with P_U uniform over all N(N-1) ordered pairs,
makes the mini-batch loss (eq. 23) an unbiased estimate of the full-data
loss (eq. 24-25).

Formulas over labels and class counts only: `keras_dml.losses.BalancedContrastive`
weights its pairs with them and `keras_dml.data.designs` draws the batches
(`design_sampler`, `design_batches`). Users import them from `keras_dml.data`.

Reference: Hong, Park and Kim, "Deep Metric Learning via Weighted
Contrastive Loss", sections 4 and 5.2.
"""

import dataclasses

import numpy as np

from keras_dml import backend

__all__ = ["GroupDesign", "RandomPairDesign", "importance_weights"]

tf = backend.require_tensorflow("keras_dml.data.importance_weights")


def _counts_stats(class_counts):
    counts = tf.cast(tf.convert_to_tensor(class_counts), tf.float32)
    if counts.shape.rank != 1:
        raise ValueError(f"class_counts must be 1-D; got shape {counts.shape}.")
    num_classes = tf.reduce_sum(tf.cast(counts > 0, tf.float32))
    return counts, num_classes, tf.reduce_sum(counts)


@dataclasses.dataclass(frozen=True)
class GroupDesign:
    """The (m, n)-group design: n classes, m samples each, all ordered pairs.

    Classes are drawn once per epoch over classes (by `ClassBalancedSampler`,
    so `class_balanced_batches(data, n, m)` is this design), samples in
    passes without replacement within a class. Classes with fewer than m samples cannot be
    drawn; they are left out, and `class_counts` must then give them 0
    (`class_counts(labels)` does).

    Args:
        m: Samples per class (k). Must be at least 2.
        n: Classes per batch (C). Must be at least 2.

    Reference: weighted contrastive paper, section 4.2, eq. 9 and 25.
    """

    m: int
    n: int

    def __post_init__(self):
        if self.m < 2 or self.n < 2:
            raise ValueError(f"GroupDesign needs m >= 2 and n >= 2; got m={self.m}, "
                             f"n={self.n}.")

    @property
    def batch_size(self):
        return self.m * self.n

    def class_counts(self, labels):
        """Per-class counts with the classes this design cannot draw set to 0."""
        counts = np.bincount(np.asarray(labels))
        return np.where(counts >= self.m, counts, 0)

    def pair_weights(self, y_i, y_j, class_counts):
        """W_ij of eq. 25 for label arrays `y_i`, `y_j` (any equal shapes)."""
        counts, num_classes, total = _counts_stats(class_counts)
        n_i, n_j = tf.gather(counts, y_i), tf.gather(counts, y_j)
        m, n = float(self.m), float(self.n)
        scale = num_classes * (m * n - 1.0) / (total * (total - 1.0))
        positive = scale * n_i * (n_i - 1.0) / (m - 1.0)
        negative = scale * (num_classes - 1.0) * n_i * n_j / (m * (n - 1.0))
        return tf.where(tf.equal(y_i, y_j), positive, negative)


@dataclasses.dataclass(frozen=True)
class RandomPairDesign:
    """The p-random design: each pair is positive with probability p.

    A positive pair: a class uniformly at random, then an ordered pair of two
    distinct samples of it. A negative pair: an ordered pair of two distinct
    classes uniformly at random, one sample of each. Batches lay the pairs
    out as `x[2t]`, `x[2t + 1]`.

    Args:
        p: Probability of a positive pair, in (0, 1).
        num_pairs: Pairs per batch (the batch holds `2 * num_pairs` samples).

    Reference: weighted contrastive paper, section 4.1, eq. 8 and 24.
    """

    p: float
    num_pairs: int

    def __post_init__(self):
        if not 0.0 < self.p < 1.0:
            raise ValueError(f"p must lie in (0, 1); got {self.p}.")
        if self.num_pairs < 1:
            raise ValueError(f"num_pairs must be positive; got {self.num_pairs}.")

    @property
    def batch_size(self):
        return 2 * self.num_pairs

    def class_counts(self, labels):
        """Per-class counts (every class must have at least 2 samples)."""
        return np.bincount(np.asarray(labels))

    def pair_weights(self, y_i, y_j, class_counts):
        """W_ij of eq. 24 for label arrays `y_i`, `y_j` (any equal shapes)."""
        counts, num_classes, total = _counts_stats(class_counts)
        n_i, n_j = tf.gather(counts, y_i), tf.gather(counts, y_j)
        scale = num_classes / (total * (total - 1.0))
        positive = scale * n_i * (n_i - 1.0) / self.p
        negative = scale * (num_classes - 1.0) * n_i * n_j / (1.0 - self.p)
        return tf.where(tf.equal(y_i, y_j), positive, negative)


def importance_weights(labels, class_counts, design):
    """Importance weight of every ordered pair of a batch, as a `(B, B)` matrix.

    For a `GroupDesign` every ordered pair `i != j` is a sampled pair
    (eq. 25; the diagonal is 0). For a `RandomPairDesign` only the sampled
    pairs `(2t, 2t + 1)` carry their weight (eq. 24), every other entry is 0,
    so the matrix is also the pair mask. The mini-batch loss of eq. 23 is the
    mean of `W * pair_loss` over the sampled pairs.

    Args:
        labels: int `(B,)` batch labels, indices into `class_counts`.
        class_counts: `(L,)` number of training samples per class (N_c of
            the full training set; classes the design cannot draw as 0).
        design: A `GroupDesign` or `RandomPairDesign`.

    Returns:
        float32 `(B, B)`.

    Examples:

    >>> design = GroupDesign(m=4, n=16)
    >>> counts = np.bincount(train.labels)  # doctest: +SKIP
    >>> w = importance_weights(batch_labels, counts, design)  # doctest: +SKIP

    Reference: weighted contrastive paper, eq. 23-25.
    """
    labels = tf.convert_to_tensor(labels)
    if labels.shape.rank != 1:
        raise ValueError(f"labels must be 1-D; got shape {labels.shape}.")
    if isinstance(design, GroupDesign):
        w = design.pair_weights(labels[:, None], labels[None, :], class_counts)
        return tf.linalg.set_diag(w, tf.zeros_like(labels, tf.float32))
    if isinstance(design, RandomPairDesign):
        size = tf.shape(labels)[0]
        tf.debugging.assert_equal(size % 2, 0, "a p-random batch has an even size")
        w = design.pair_weights(labels[0::2], labels[1::2], class_counts)
        rows = tf.range(0, size, 2)
        pairs = tf.stack([rows, rows + 1], axis=1)
        return tf.scatter_nd(pairs, w, tf.stack([size, size]))
    raise ValueError(
        f"design must be a GroupDesign or RandomPairDesign; got {type(design).__name__}."
    )
