"""Triplet miners (semi-hard, batch-hard, easy-positive) and the pair-margin miner.

A triplet miner picks, for each anchor a and positive p, at most one negative
n(a, p). It is stored in O(N^2) as two (N, N) tensors, never as an N^3 tensor of
triplets (loops run over the K kept positives per anchor, one (N, N) pass each):

    valid[a, p]            True when the triplet (a, p, n(a, p)) is kept
    negative_index[a, p]   the column of n(a, p) (meaningful where `valid`)

`select` returns that pair, which `keras_dml.losses.Triplet(miner=...)` consumes
directly. As a plain `Miner` (`mine`, used by `Contrastive(miner=...)` and every
other pair loss) it returns the pair masks the triplets touch: the kept positives
are the valid (a, p) and the kept negatives are the chosen (a, n(a, p)).

Miners look at a similarity (higher = closer); losses on distances pass the
negated distance, so "closest" always means "largest similarity".
"""

import keras

from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.hyperparameters import finite
from keras_dml.mining.base import Miner

__all__ = ["EasyMiner", "HardMiner", "PairMarginMiner", "SLOT_LIMIT", "SemiHardMiner",
           "TRIPLET_MINERS", "TripletMiner", "chosen_negative_counts", "for_each_slot",
           "per_anchor_choice", "slots"]

_BIG = ops.FLOAT32_MAX


# Up to this many kept positives per anchor, per-positive loops over "slots" (one
# (N, N) pass each) beat sorting every row; beyond it the sort-based path is used.
SLOT_LIMIT = 16


def slots(mask):
    """Rank (1..K) of each True entry within its row, 0 elsewhere, and K (max per row)."""
    mask = keras.ops.cast(mask, "int32")
    rank = keras.ops.cumsum(mask, axis=1) * mask
    return rank, keras.ops.max(rank, initial=0)


def for_each_slot(mask, body, state):
    """Runs `state = body(slot, *state)` for slot = (rank == j), j = 1..K (a while loop).

    Each slot holds at most one True per row: the j-th kept entry of every row.
    """
    rank, count = slots(mask)

    def step(j, *state):
        return (j + 1,) + tuple(body(keras.ops.equal(rank, j), *state))

    start = keras.ops.convert_to_tensor(1, "int32")
    return keras.ops.while_loop(lambda j, *_: j <= count, step, (start,) + tuple(state))[1:]


def _rows(vector):
    """(N,) -> (N, 1)."""
    return keras.ops.expand_dims(vector, 1)


def _semihard_by_slots(similarity, positive, negative):
    negatives_only = ops.masked_fill(similarity, negative, ops.FLOAT32_MIN)

    def body(slot, valid, negative_index):
        anchor_positive = keras.ops.sum(keras.ops.where(slot, similarity, 0.0), axis=1,
                                        keepdims=True)
        chosen, found = ops.closest_below(negatives_only, anchor_positive)
        return (valid | (slot & _rows(found)),
                keras.ops.where(slot, _rows(chosen), negative_index))

    return for_each_slot(positive, body, (keras.ops.zeros_like(positive),
                                          keras.ops.zeros(keras.ops.shape(similarity), "int32")))


def _semihard_by_sorting(similarity, positive, negative):
    keys = ops.masked_fill(similarity, negative, _BIG)  # non-negatives sorted to the end
    order = primitives.argsort_rows(keys)
    ordered = primitives.take_along_rows(keys, order)
    below = primitives.searchsorted_rows(ordered, similarity, side="left")  # s < s_ap
    valid = positive & (below > 0)
    negative_index = primitives.take_along_rows(order, keras.ops.maximum(below - 1, 0))
    return valid, negative_index


def semihard_triplets(similarity, positive, negative):
    """FaceNet semi-hard selection: per (a, p), the closest negative farther than p.

    The chosen n maximises s_an subject to s_an < s_ap. With few positives per
    anchor (C x k batches) one masked arg-max over the (N, N) matrix per positive
    slot finds them all; with many, each anchor's negatives are sorted once and
    searched per positive. O(N^2) memory either way. A pair (a, p) without such a
    negative keeps no triplet.

    Returns:
        (valid, negative_index): bool (N, N) and int32 (N, N).
    """
    _, count = slots(positive)
    return keras.ops.cond(count <= SLOT_LIMIT,
                          lambda: _semihard_by_slots(similarity, positive, negative),
                          lambda: _semihard_by_sorting(similarity, positive, negative))


def per_anchor_choice(similarity, positive, negative, easiest_positive):
    """Per anchor: (positive column, negative column, has both) -- each (N,).

    The positive is the least similar one (batch-hard) or, with
    `easiest_positive`, the most similar one; the negative is the most similar.
    """
    positive_keys = ops.masked_fill(similarity, positive, -_BIG if easiest_positive else _BIG)
    if easiest_positive:
        chosen_positive = primitives.argmax_rows(positive_keys)
    else:
        chosen_positive = primitives.argmin_rows(positive_keys)
    chosen_negative = primitives.argmax_rows(ops.masked_fill(similarity, negative, -_BIG))
    has_both = keras.ops.any(positive, axis=1) & keras.ops.any(negative, axis=1)
    return chosen_positive, chosen_negative, has_both


def _one_per_anchor(similarity, positive, negative, easiest_positive):
    chosen_positive, chosen_negative, has_both = per_anchor_choice(
        similarity, positive, negative, easiest_positive)
    n = keras.ops.shape(similarity)[1]
    valid = keras.ops.one_hot(chosen_positive, n, dtype="bool") & _rows(has_both)
    negative_index = keras.ops.broadcast_to(_rows(chosen_negative), keras.ops.shape(similarity))
    return valid, negative_index


def hard_triplets(similarity, positive, negative):
    """Batch-hard selection (Hermans et al.): hardest positive and hardest negative per anchor."""
    return _one_per_anchor(similarity, positive, negative, easiest_positive=False)


def easy_positive_triplets(similarity, positive, negative):
    """Easy-positive selection (Xuan et al.): most similar positive, hardest negative per anchor."""
    return _one_per_anchor(similarity, positive, negative, easiest_positive=True)


def chosen_negative_counts(valid, negative_index, weights=None):
    """(N, N) float: sum over valid (a, p) of weights[a, p] at (a, negative_index[a, p]).

    Without `weights`, the number of kept triplets each (a, n) pair belongs to.
    """
    weights = keras.ops.cast(valid, "float32") if weights is None else keras.ops.where(
        valid, weights, 0.0)
    n = keras.ops.shape(valid)[1]

    def by_slots():
        def body(slot, counts):
            chosen = keras.ops.sum(keras.ops.where(slot, negative_index, 0), axis=1)
            weight = keras.ops.sum(keras.ops.where(slot, weights, 0.0), axis=1, keepdims=True)
            return (counts + keras.ops.one_hot(chosen, n) * weight,)

        return for_each_slot(valid, body, (keras.ops.zeros_like(weights),))[0]

    def by_scatter():
        # row a's weights, summed per chosen column: one segment per (row, column)
        rows = keras.ops.shape(valid)[0]
        segments = negative_index + _rows(keras.ops.arange(rows, dtype="int32")) * n
        counts = keras.ops.segment_sum(keras.ops.reshape(weights, (-1,)),
                                       keras.ops.reshape(segments, (-1,)), rows * n)
        return keras.ops.reshape(counts, keras.ops.shape(weights))

    return keras.ops.cond(slots(valid)[1] <= SLOT_LIMIT, by_slots, by_scatter)


def chosen_negative_mask(valid, negative_index):
    """(N, N) bool: True at (a, n) when n is the chosen negative of some valid (a, p)."""
    return chosen_negative_counts(valid, negative_index) > 0


class TripletMiner(Miner):
    """Base of the miners that choose one negative per (anchor, positive) pair.

    Args:
        margin: if given, keep only the triplets that violate it,
            s_an > s_ap - margin (the ones with a non-zero triplet loss). Defaults
            to None (keep every selected triplet).
    """

    select_fn = None  # (similarity, positive, negative) -> (valid, negative_index)
    row_local = True

    def __init__(self, margin=None):
        self.margin = None if margin is None else finite("margin", margin)

    def select(self, similarity, positive, negative):
        """Kept triplets as (valid (N, N) bool, negative_index (N, N) int32)."""
        similarity = keras.ops.stop_gradient(ops.to_float32(similarity))
        valid, negative_index = type(self).select_fn(similarity, positive, negative)
        if self.margin is not None:
            negative_similarity = primitives.take_along_rows(similarity, negative_index)
            valid = valid & (negative_similarity > similarity - self.margin)
        return keras.ops.stop_gradient(valid), keras.ops.stop_gradient(negative_index)

    def mine(self, similarity, positive, negative):
        valid, negative_index = self.select(similarity, positive, negative)
        return valid, negative & chosen_negative_mask(valid, negative_index)

    def get_config(self):
        return {"margin": self.margin}


@keras.saving.register_keras_serializable(package="keras_dml")
class SemiHardMiner(TripletMiner):
    """Semi-hard mining (Schroff et al., FaceNet 2015).

    For each anchor a and positive p, the chosen negative is the closest negative
    farther from a than p: argmax s_an subject to s_an < s_ap. Pairs (a, p) without
    such a negative keep no triplet. O(N^2) memory (a sort and a binary search per
    anchor), never an N^3 tensor.

    Args:
        margin: keep only triplets with s_an > s_ap - margin. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.Triplet(miner=keras_dml.mining.SemiHardMiner())
    >>> pairs = keras_dml.losses.Contrastive(miner=keras_dml.mining.SemiHardMiner(0.1))

    Reference:
        Schroff, Kalenichenko, Philbin, "FaceNet", CVPR 2015, section 3.2.
    """

    select_fn = staticmethod(semihard_triplets)


@keras.saving.register_keras_serializable(package="keras_dml")
class HardMiner(TripletMiner):
    """Batch-hard mining: per anchor, its hardest positive and its hardest negative.

    Args:
        margin: keep only triplets with s_an > s_ap - margin. Defaults to None.

    Reference:
        Hermans, Beyer, Leibe, "In Defense of the Triplet Loss for Person
        Re-Identification", 2017.
    """

    select_fn = staticmethod(hard_triplets)
    easiest_positive = False


@keras.saving.register_keras_serializable(package="keras_dml")
class EasyMiner(TripletMiner):
    """Easy-positive mining: per anchor, its most similar positive and hardest negative.

    Args:
        margin: keep only triplets with s_an > s_ap - margin. Defaults to None.

    Reference:
        Xuan, Stylianou, Pless, "Improved Embeddings with Easy Positive Triplet
        Mining", WACV 2020.
    """

    select_fn = staticmethod(easy_positive_triplets)
    easiest_positive = True


@keras.saving.register_keras_serializable(package="keras_dml")
class PairMarginMiner(Miner):
    """Keeps the pairs on the wrong side of a similarity threshold.

    Keeps positive pairs with s < pos_margin and negative pairs with s > neg_margin.
    The thresholds are on the similarity the miner sees: cosine similarity, or the
    negated distance for losses on distances (e.g. pos_margin=-0.2 keeps positives
    farther apart than 0.2).

    Args:
        pos_margin: defaults to 0.8.
        neg_margin: defaults to 0.5.
    """

    row_local = True

    def __init__(self, pos_margin=0.8, neg_margin=0.5):
        self.pos_margin = finite("pos_margin", pos_margin)
        self.neg_margin = finite("neg_margin", neg_margin)

    def mine(self, similarity, positive, negative):
        return positive & (similarity < self.pos_margin), negative & (similarity > self.neg_margin)

    def get_config(self):
        return {"pos_margin": self.pos_margin, "neg_margin": self.neg_margin}


TRIPLET_MINERS = {"semihard": SemiHardMiner, "hard": HardMiner, "easy": EasyMiner}
