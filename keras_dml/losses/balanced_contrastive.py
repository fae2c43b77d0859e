"""Balanced contrastive loss with importance sampling (Hong, Park and Kim)."""

import dataclasses

import keras
import numpy as np

from keras_dml import hyperparameters as _hyper
from keras_dml import validation
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["BalancedContrastive"]

_DESIGNS = ("GroupDesign", "RandomPairDesign")


def _designs():
    from keras_dml import pair_designs  # imported lazily: it needs TensorFlow

    return pair_designs


def _design(design):
    """A batch design from None, a design object, or its {"class_name", "config"} dict."""
    if design is None:
        return None
    if isinstance(design, dict):
        if design.get("class_name") not in _DESIGNS:
            raise ValueError(f"Unknown batch design {design!r}: expected one of {_DESIGNS}.")
        return getattr(_designs(), design["class_name"])(**design["config"])
    if type(design).__name__ not in _DESIGNS:
        raise ValueError(
            f"design must be a keras_dml.data GroupDesign or RandomPairDesign, got {design!r}."
        )
    return design


def _class_counts(class_counts):
    if class_counts is None:
        return None
    counts = np.asarray(class_counts)
    if counts.ndim != 1 or counts.size < 2 or not np.issubdtype(counts.dtype, np.number):
        raise ValueError(
            f"class_counts must be a 1-D sequence of per-class sample counts (at least two "
            f"classes), got {class_counts!r}."
        )
    if np.any(counts < 0) or np.any(counts != np.round(counts)) or np.sum(counts > 0) < 2:
        raise ValueError("class_counts must be non-negative integers with at least two "
                         f"non-empty classes, got {class_counts!r}.")
    return [int(c) for c in counts]


def balanced_contrastive_terms(distance, positive, negative, eta, importance, margin):
    """Per-anchor value of eq. 23 (eq. 15 when importance is None) and exact weights.

        value_a = N/B sum_j W_aj [Y_aj D_aj^2 + (1 - Y_aj) eta_aj [margin - D_aj]_+^2]

    over the B sampled ordered pairs (kept pairs, and W > 0 when W is given), so
    that the mean over anchors is eq. 23's (1/B) sum. Weights:
    d value_a / d D_aj = N/B W_aj (2 Y D_aj - 2 (1 - Y) eta_aj [margin - D_aj]_+).
    """
    sampled = positive | negative
    if importance is not None:
        sampled &= importance > 0
        importance = keras.ops.where(sampled, importance, 0.0)
    else:
        importance = keras.ops.cast(sampled, "float32")
    rows = keras.ops.cast(keras.ops.shape(distance)[0], "float32")
    scale = keras.ops.divide_no_nan(rows, keras.ops.sum(keras.ops.cast(sampled, "float32")))
    positive_w = keras.ops.where(positive, importance, 0.0) * scale
    negative_w = keras.ops.where(negative, importance * eta, 0.0) * scale
    gap = keras.ops.relu(margin - distance)
    value = keras.ops.sum(positive_w * keras.ops.square(distance)
                          + negative_w * keras.ops.square(gap), 1)
    return value, 2.0 * (positive_w * distance - negative_w * gap)


@register(row_local=False)
class BalancedContrastive(PairLoss):
    """Balanced contrastive loss (Hong et al., eq. 10, 15-16) with importance weights (eq. 23-25).

    The weighted contrastive loss (eq. 10) with g(d) = d^2 and h(d) = [margin - d]_+^2
    (eq. 5) on Euclidean distances D, and the negative-pair weights of eq. 16,

        eta_ij = lambda / (L - 1) * (N_{y_i} - 1) / N_{y_j},

    L the number of classes and N_c the number of training samples of class c:
    each positive pair is compared with lambda negatives on average (eq. 13-15).
    On a batch of B sampled ordered pairs (i, j):

        L = 1/B sum_{(i,j)} W_ij [Y_ij D_ij^2 + (1 - Y_ij) eta_ij h(D_ij)]     (eq. 23)

    With `design=None`, W = 1: eq. 15 averaged over the batch's ordered pairs.
    With a batch design of `keras_dml.data` (`GroupDesign(m, n)` or
    `RandomPairDesign(p, num_pairs)`), W_ij are its importance weights (eq. 24-25),
    computed inside the loss from the batch labels and `class_counts` by
    `keras_dml.data.importance_weights`; nothing has to be packed into
    y_true or sample_weight. For the p-random design only the design's pairs
    (2t, 2t + 1) are sampled, so B = num_pairs. Feed batches drawn by
    `keras_dml.data.designs.design_batches(data, design)`.

    Pair weights (on distances) are the exact derivatives:
    W_ij 2 D_ij / B for positives, W_ij eta_ij 2 [margin - D_ij]_+ / B for negatives.

    Args:
        class_counts: N_c per class id (length L, the full training set's counts;
            labels index into it). Defaults to None: the batch is taken as the
            dataset (N_c counted in the batch, L = classes in the batch).
        design: None, or the `GroupDesign` / `RandomPairDesign` the batches are
            drawn with (needs `class_counts`). Defaults to None.
        lam: lambda, negatives compared per positive pair. Defaults to 256 (the
            paper's setting for all experiments).
        margin: alpha of h(d) = [alpha - d]_+^2. Defaults to 1.0 (the paper does not
            state its value).
        miner: optional `keras_dml.mining.Miner`. Defaults to None.

    Examples:

    >>> from keras_dml.data.designs import GroupDesign, design_batches
    >>> design = GroupDesign(m=4, n=16)
    >>> counts = np.bincount(train_labels)  # doctest: +SKIP
    >>> loss = keras_dml.losses.BalancedContrastive(class_counts=counts,  # doctest: +SKIP
    ...                                             design=design)
    >>> model.fit(design_batches(train_source, design), steps_per_epoch=100)  # doctest: +SKIP

    Reference:
        Hong, Park, Kim, "Deep Metric Learning via Weighted Contrastive Loss",
        eq. 4-5, 10, 15-16, 23-25.
    """

    metrics = ("euclidean",)
    default_metric = "euclidean"
    config_keys = ("miner", "class_counts", "lam", "margin")

    def __init__(self, class_counts=None, design=None, lam=256.0, margin=1.0, *, miner=None,
                 reduction="sum_over_batch_size", name="balanced_contrastive", dtype=None):
        super().__init__(miner=miner, reduction=reduction, name=name, dtype=dtype)
        self.class_counts = _class_counts(class_counts)
        self.design = _design(design)
        if self.design is not None and self.class_counts is None:
            raise ValueError("Importance weights need the training set's class_counts: pass "
                             "BalancedContrastive(class_counts=..., design=...).")
        self.lam = _hyper.positive("lam", lam)
        self.margin = _hyper.positive("margin", margin)

    # -- eq. 16 and eq. 24-25 from the labels -------------------------------------------
    def negative_weights(self, labels, reference_labels=None):
        """eta_ij of eq. 16 for every (query, key) pair, (N, M)."""
        reference_labels = labels if reference_labels is None else reference_labels
        if self.class_counts is None:  # the reference set is taken as the dataset
            present = keras.ops.cast(reference_labels >= 0, "float32")
            same = keras.ops.cast(
                keras.ops.equal(reference_labels[:, None], reference_labels[None, :]),
                "float32") * present[None, :]
            table = keras.ops.sum(same, axis=1)
            num_classes = keras.ops.sum(keras.ops.divide_no_nan(present, table))
            counts = keras.ops.sum(
                keras.ops.cast(keras.ops.equal(labels[:, None], reference_labels[None, :]),
                               "float32") * present[None, :], axis=1)
            key_counts = table
        else:
            table = keras.ops.convert_to_tensor(self.class_counts, "float32")
            size = len(self.class_counts) - 1
            counts = primitives.gather(table, keras.ops.clip(labels, 0, size))
            key_counts = primitives.gather(table, keras.ops.clip(reference_labels, 0, size))
            num_classes = float(sum(count > 0 for count in self.class_counts))
        ratio = keras.ops.divide_no_nan(counts[:, None] - 1.0, key_counts[None, :])
        return keras.ops.divide_no_nan(self.lam, num_classes - 1.0) * ratio

    def importance_weights(self, labels):
        """W_ij of the batch design (eq. 24-25), or None without a design."""
        if self.design is None:
            return None
        return _designs().importance_weights(labels, self.class_counts, self.design)

    def check(self, labels, embeddings):
        labels, embeddings = super().check(labels, embeddings)
        if self.class_counts is not None and primitives.is_concrete(labels):
            size = len(self.class_counts)
            validation.check_label_range(labels, size, bound="len(class_counts)",
                                         name=f"labels (class_counts has {size} classes)")
            empty = sorted({int(v) for v in keras.ops.convert_to_numpy(labels)
                            if self.class_counts[v] == 0})
            if empty:
                raise ValueError(f"labels {empty[:5]} have class_counts 0: a batch cannot "
                                 "hold a class the training set does not.")
        return labels, embeddings

    def check_reference(self, reference, embeddings):
        if self.design is not None:
            raise ValueError("A batch design's importance weights are defined on the batch's "
                             "own pairs: BalancedContrastive(design=...) takes no reference set.")
        return super().check_reference(reference, embeddings)

    def compute_terms(self, matrix, pairs):
        eta = self.negative_weights(pairs.labels, pairs.reference_labels)
        importance = self.importance_weights(pairs.labels)
        return balanced_contrastive_terms(matrix, pairs.positive, pairs.negative, eta,
                                          importance, self.margin)

    def get_config(self):
        design = None if self.design is None else {
            "class_name": type(self.design).__name__, "config": dataclasses.asdict(self.design)}
        return {**super().get_config(), "design": design}
