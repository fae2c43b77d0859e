"""The batches of the weighted contrastive paper's designs.

The designs (`GroupDesign`, `RandomPairDesign`) and their `importance_weights` are
formulas over labels and class counts, in `keras_dml.pair_designs` (below both
this pipeline and the loss that weights its pairs with them) and importable from
here; this module draws their batches (`design_sampler`, `design_batches`).

Reference: Hong, Park and Kim, "Deep Metric Learning via Weighted
Contrastive Loss", sections 4 and 5.2.
"""

import warnings

import numpy as np

from keras_dml import backend, hyperparameters
from keras_dml.data.pipeline import batches_from_sampler, batches_from_stream
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import make_source
from keras_dml.pair_designs import (  # noqa: F401 (public here)
    GroupDesign, RandomPairDesign, importance_weights)

__all__ = ["GroupDesign", "RandomPairDesign", "RandomPairSampler", "design_batches",
           "design_sampler", "importance_weights"]

tf = backend.require_tensorflow("keras_dml.data.design_batches (tf.data)")


def design_sampler(design, labels, seed=None):
    """The index sampler drawing `design`'s batches from `labels`: a
    `ClassBalancedSampler` for a `GroupDesign` (classes it cannot draw left out), a
    `RandomPairSampler` for a `RandomPairDesign`."""
    if isinstance(design, GroupDesign):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return ClassBalancedSampler(labels, design.n, design.m, small_classes="drop",
                                        seed=seed)
    if isinstance(design, RandomPairDesign):
        return RandomPairSampler(labels, design.p, design.num_pairs, seed=seed)
    raise ValueError(
        f"design must be a GroupDesign or RandomPairDesign; got {type(design).__name__}.")


class RandomPairSampler:
    """Index batches of the p-random design (see `RandomPairDesign`).

    Args:
        labels: Integer label per sample, `(N,)`; every class needs at
            least 2 samples.
        p: Probability of a positive pair.
        num_pairs: Pairs per batch.
        seed: NumPy seed. Defaults to `None`.
    """

    def __init__(self, labels, p, num_pairs, seed=None):
        labels = np.asarray(labels)
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                f"labels must be a 1-D integer array; got shape {labels.shape}.")
        self.p, self.num_pairs = float(p), int(num_pairs)
        _, inverse = np.unique(labels, return_inverse=True)
        self.counts = np.bincount(inverse)
        if len(self.counts) < 2 or self.counts.min() < 2:
            raise ValueError(
                "The p-random design needs at least 2 classes with at least 2 "
                f"samples each; {int((self.counts < 2).sum())} classes have fewer."
            )
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        self.order = np.argsort(inverse, kind="stable")
        self._rng = np.random.default_rng(seed)

    def next_batch(self):
        """Interleaved indices `[i_0, j_0, i_1, j_1, ...]`, int64 `(2 * num_pairs,)`."""
        rng, num_classes, b = self._rng, len(self.counts), self.num_pairs
        positive = rng.random(b) < self.p
        first = rng.integers(num_classes, size=b)
        second = rng.integers(num_classes - 1, size=b)
        second += second >= first
        second = np.where(positive, first, second)
        pos_i = rng.integers(self.counts[first])
        pos_j = rng.integers(self.counts[second] - positive)
        pos_j += positive & (pos_j >= pos_i)
        i = self.order[self.offsets[first] + pos_i]
        j = self.order[self.offsets[second] + pos_j]
        return np.stack([i, j], axis=1).reshape(-1).astype(np.int64)

    def __iter__(self):
        while True:
            yield self.next_batch()


@hyperparameters.renamed_keywords(source="data")
def design_batches(data, design, *, seed=None, preprocessing=None, training=True,
                   map_fn=None):
    """An infinite `tf.data.Dataset` of `(x, y)` batches drawn by `design`.

    Args:
        data: As for `class_balanced_batches`. `source=` is its deprecated name.
        design: A `GroupDesign` or `RandomPairDesign`.
        seed: Seed of the index stream and the augmentation. Defaults to `None`.
        preprocessing: As for `class_balanced_batches`.
        training: As for `class_balanced_batches`.
        map_fn: As for `class_balanced_batches`.

    Returns:
        `tf.data.Dataset`; feed `importance_weights(y, counts, design)` to
        the loss (e.g. `BalancedContrastive`).
    """
    source = make_source(as_data(data, SAMPLES, "data"), preprocessing=preprocessing,
                         training=training)
    sampler = design_sampler(design, source.labels, seed)  # validates now
    if isinstance(sampler, ClassBalancedSampler):  # step-indexed: no Python in tf.data
        return batches_from_stream(source, sampler, seed=seed, map_fn=map_fn)
    return batches_from_sampler(source, lambda: design_sampler(design, source.labels, seed),
                                design.batch_size, seed=seed, map_fn=map_fn)
