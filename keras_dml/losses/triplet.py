"""Triplet loss with all-triplet, batch-hard, semi-hard or easy-positive mining, in O(N^2)."""

import warnings

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import mining as mining_lib
from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register
from keras_dml.mining import triplet as triplet_mining
from keras_dml.mining.triplet import TRIPLET_MINERS, TripletMiner

__all__ = ["Triplet"]

_MINING = ("all",) + tuple(TRIPLET_MINERS)
_DEFAULT_MARGIN = {"cosine": 0.1, "euclidean": 0.2, "squared_euclidean": 0.2}


def _rows(vector):
    """(N,) -> (N, 1)."""
    return keras.ops.expand_dims(vector, 1)


def _count_below(values, mask, queries, side, fill):
    """Per row, how many masked-in `values` are < (side="left") / <= ("right") each query."""
    keys = keras.ops.sort(keras.ops.where(mask, values, fill), axis=1)
    return keys, primitives.searchsorted_rows(keys, queries, side=side)


def all_triplet_terms_by_sorting(closeness, positive, negative, margin):
    """Sum over every triplet of [c_an - c_ap + margin]_+ per anchor, and its gradient.

    Per anchor, the negatives' closeness is sorted once; for each positive a binary
    search finds the negatives inside the margin and a cumulative sum gives their
    total, so the N^3 triplets are never materialised (O(N^2 log N) time, O(N^2)
    memory).

    Returns:
        (per-anchor sum (N,), its derivative w.r.t. `closeness` (N, N)).
    """
    n = keras.ops.shape(closeness)[1]
    # [mining] negatives n with c_an > c_ap - margin, per (a, p)
    thresholds = closeness - margin
    keys, at_most = _count_below(closeness, negative, thresholds, "right", ops.FLOAT32_MIN)
    active = n - at_most  # negatives strictly above the threshold
    values = keras.ops.where(keys > ops.FLOAT32_MIN, keys, 0.0)
    prefix = keras.ops.concatenate(
        [keras.ops.zeros_like(values[:, :1]), keras.ops.cumsum(values, axis=1)], axis=1)
    above = prefix[:, -1:] - primitives.take_along_rows(prefix, at_most)
    active_f = keras.ops.where(positive, keras.ops.cast(active, "float32"), 0.0)
    # [loss] sum_n (c_an - c_ap + margin) over the active negatives
    per_pair = keras.ops.where(positive, above - active_f * thresholds, 0.0)
    # [weighting] each negative counts the positives p with c_ap < c_an + margin
    _, pulls = _count_below(closeness, positive, closeness + margin, "left", ops.FLOAT32_MAX)
    pushes = keras.ops.where(negative, keras.ops.cast(pulls, "float32"), 0.0)
    return keras.ops.sum(per_pair, axis=1), pushes - active_f


def _all_triplets_by_slots(closeness, positive, negative, margin):
    def body(slot, total, gradient):
        anchor_positive = keras.ops.sum(keras.ops.where(slot, closeness, 0.0), axis=1,
                                        keepdims=True)
        rows = keras.ops.any(slot, axis=1, keepdims=True)  # anchors with a j-th positive
        hinge = keras.ops.where(negative & rows, closeness - anchor_positive + margin, 0.0)
        active = keras.ops.cast(hinge > 0, "float32")
        pulls = keras.ops.sum(active, axis=1, keepdims=True)
        gradient += active - keras.ops.cast(slot, "float32") * pulls
        return total + keras.ops.sum(keras.ops.relu(hinge), axis=1), gradient

    return triplet_mining.for_each_slot(
        positive, body, (keras.ops.zeros_like(closeness[:, 0]), keras.ops.zeros_like(closeness)))


def all_triplet_terms(closeness, positive, negative, margin):
    """Sum over every triplet of [c_an - c_ap + margin]_+ per anchor, and its gradient.

    With few positives per anchor, one (N, N) pass per positive slot; with many,
    the sorted-negatives path (`all_triplet_terms_by_sorting`). Never N^3 memory.

    Returns:
        (per-anchor sum (N,), its derivative w.r.t. `closeness` (N, N), triplet count).
    """
    total, gradient = keras.ops.cond(
        triplet_mining.slots(positive)[1] <= triplet_mining.SLOT_LIMIT,
        lambda: _all_triplets_by_slots(closeness, positive, negative, margin),
        lambda: all_triplet_terms_by_sorting(closeness, positive, negative, margin))
    count = keras.ops.sum(
        keras.ops.sum(keras.ops.cast(positive, "float32"), axis=1)
        * keras.ops.sum(keras.ops.cast(negative, "float32"), axis=1)
    )
    return total, gradient, count


def _one_triplet_per_anchor(closeness, positive_index, negative_index, valid, margin, miner):
    """[c_an - c_ap + margin]_+ of one triplet (a, p_a, n_a) per anchor (where `valid`,
    and within the miner's margin), its gradient w.r.t. `closeness` and its count."""
    anchor_positive = primitives.take_along_rows(closeness, positive_index)
    anchor_negative = primitives.take_along_rows(closeness, negative_index)
    if miner.margin is not None:
        valid &= keras.ops.stop_gradient(anchor_negative - anchor_positive) > -miner.margin
    hinge = keras.ops.where(valid, anchor_negative - anchor_positive + margin, 0.0)
    active = _rows(keras.ops.cast(hinge > 0, "float32"))
    n = keras.ops.shape(closeness)[1]
    gradient = (keras.ops.one_hot(negative_index, n) - keras.ops.one_hot(positive_index, n)) \
        * active
    return keras.ops.relu(hinge), gradient, keras.ops.sum(keras.ops.cast(valid, "float32"))


def _per_anchor_terms(closeness, positive, negative, margin, miner):
    """Batch-hard / easy-positive: one triplet per anchor, in a few (N, N) passes."""
    chosen_positive, chosen_negative, valid = triplet_mining.per_anchor_choice(
        keras.ops.stop_gradient(closeness), positive, negative, miner.easiest_positive)
    return _one_triplet_per_anchor(closeness, chosen_positive, chosen_negative, valid,
                                   margin, miner)


def _semihard_terms_by_slots(closeness, positive, negative, margin, miner):
    """Semi-hard selection and the hinge fused in one pass per positive slot."""
    fixed = keras.ops.stop_gradient(closeness)
    negatives_only = ops.masked_fill(fixed, negative, ops.FLOAT32_MIN)

    def body(slot, total, gradient, count):
        column = primitives.argmax_rows(keras.ops.cast(slot, "int32"))
        fixed_positive = _rows(primitives.take_along_rows(fixed, column))
        chosen, below = ops.closest_below(negatives_only, fixed_positive)
        found = primitives.take_along_rows(slot, column) & below
        hinge, step, kept = _one_triplet_per_anchor(closeness, column, chosen, found, margin,
                                                    miner)
        return total + hinge, gradient + step, count + kept

    return triplet_mining.for_each_slot(
        positive, body, (keras.ops.zeros_like(closeness[:, 0]), keras.ops.zeros_like(closeness),
                         keras.ops.convert_to_tensor(0.0, "float32")))


def _generic_terms(closeness, positive, negative, margin, miner):
    """Any triplet miner: [c_an(a,p) - c_ap + margin]_+ over its `select`ed triplets."""
    valid, negative_index = miner.select(closeness, positive, negative)
    negative_closeness = primitives.take_along_rows(closeness, negative_index)
    hinge = keras.ops.where(valid, negative_closeness - closeness + margin, 0.0)
    active = keras.ops.cast(hinge > 0, "float32")
    pushes = triplet_mining.chosen_negative_counts(valid, negative_index, active)
    count = keras.ops.sum(keras.ops.cast(valid, "float32"))
    return keras.ops.sum(keras.ops.relu(hinge), axis=1), pushes - active, count


def _semihard_terms(closeness, positive, negative, margin, miner):
    return keras.ops.cond(
        triplet_mining.slots(positive)[1] <= triplet_mining.SLOT_LIMIT,
        lambda: _semihard_terms_by_slots(closeness, positive, negative, margin, miner),
        lambda: _generic_terms(closeness, positive, negative, margin, miner))


# Fast paths for the built-in miners; any other TripletMiner goes through `select`.
_FAST_TERMS = {
    triplet_mining.SemiHardMiner: _semihard_terms,
    triplet_mining.HardMiner: _per_anchor_terms,
    triplet_mining.EasyMiner: _per_anchor_terms,
}


@register(row_local=False)
class Triplet(PairLoss):
    """Triplet loss with a margin on similarities or distances (weighted contrastive eq. 1).

    For each kept triplet (anchor a, positive p, negative n):

        metric="cosine":             l = [S_an - S_ap + margin]_+   (unified view eq. 7)
        metric="squared_euclidean":  l = [D_ap^2 - D_an^2 + margin]_+  (FaceNet, eq. 1)
        metric="euclidean":          l = [D_ap - D_an + margin]_+

    and the loss is the mean over the kept triplet set T, (1/|T|) sum_T l (eq. 1).
    Per anchor the value is (N/|T|) sum_{T_a} l, so that Keras' mean over anchors
    is exactly eq. 1. The pair weights are 0 or 1 per active triplet (eq. 8):
    a pair's weight is the number of active triplets it belongs to, / |T|, the
    exact derivative.

    Mining (which triplets form T), by the miner:
        None: every (a, p, n) of the batch.
        `HardMiner()` / "HardMiner": batch-hard (Hermans et al.), one triplet per
            anchor from its hardest positive and hardest negative.
        `SemiHardMiner()`: FaceNet, per (a, p) the closest negative farther than p
            (pairs with none keep no triplet).
        `EasyMiner()`: easy-positive (Xuan et al.), the most similar positive with
            the hardest negative.
        any pair miner: its kept pairs form the triplets.
    Nothing N^3 is built: one (N, N) pass per positive "slot" (the j-th positive of
    every anchor), or, beyond `keras_dml.mining.triplet.SLOT_LIMIT` positives per
    anchor, each anchor's negatives sorted once and searched.

    Args:
        margin: defaults to 0.1 for cosine (0.2 on squared distances of unit
            vectors, FaceNet's alpha) and 0.2 for the distances.
        metric: "cosine", "euclidean" or "squared_euclidean". Defaults to "cosine".
        miner: a miner or its registered name (see above). Defaults to None. The
            older `distance=` and `mining="all"|"hard"|"semihard"|"easy"` still
            work, with a DeprecationWarning.

    Examples:

    >>> loss = keras_dml.losses.Triplet(miner="SemiHardMiner")
    >>> loss = keras_dml.losses.Triplet(metric="squared_euclidean", margin=0.2,
    ...                                 miner=keras_dml.mining.HardMiner())

    Reference:
        Schroff et al., "FaceNet", CVPR 2015; weighted contrastive paper eq. 1;
        unified view eq. 7-8; Hermans et al. 2017 (batch-hard).
    """

    metrics = ("cosine", "euclidean", "squared_euclidean")
    config_keys = PairLoss.config_keys + ("margin",)
    unsaved_keys = ("mining",)  # the deprecated spelling of `miner`

    @_hyper.renamed_keywords(distance="metric")
    def __init__(self, margin=None, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="triplet", dtype=None, mining=None):
        miner = mining_lib.get(miner)
        if mining is not None:
            _hyper.one_of("mining", mining, _MINING)
            instead = "None" if mining == "all" else TRIPLET_MINERS[mining].__name__
            message = _hyper.deprecation(f"Triplet(mining={mining!r})", f"pass miner={instead}")
            warnings.warn(message, DeprecationWarning, stacklevel=2)
            if isinstance(miner, TripletMiner) and mining != "all":
                raise ValueError(
                    f"Give either mining={mining!r} or a triplet miner ({miner!r}), not both.")
        if mining not in (None, "all") and miner is None:
            miner = TRIPLET_MINERS[mining]()
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        # deprecated: mining="semihard" with a pair miner, whose pairs the triplets use
        self._mining = (TRIPLET_MINERS[mining]() if mining not in (None, "all")
                        and not isinstance(self.miner, TripletMiner) else None)
        self.margin = _hyper.finite("margin", _DEFAULT_MARGIN[self.metric]
                                    if margin is None else margin)

    @property
    def selector(self):
        """The triplet miner choosing one negative per (anchor, positive), or None: all."""
        return self.miner if isinstance(self.miner, TripletMiner) else self._mining

    @property
    def pair_miner(self):
        return None if isinstance(self.miner, TripletMiner) else self.miner

    def compute_terms(self, matrix, pairs):
        sign = -1.0 if self.is_distance else 1.0
        closeness = sign * matrix
        if self.selector is None:
            total, gradient, count = all_triplet_terms(closeness, pairs.positive,
                                                       pairs.negative, self.margin)
        else:
            terms = _FAST_TERMS.get(type(self.selector), _generic_terms)
            total, gradient, count = terms(closeness, pairs.positive, pairs.negative,
                                           self.margin, self.selector)
        rows = keras.ops.cast(keras.ops.shape(matrix)[0], "float32")
        scale = keras.ops.divide_no_nan(rows, count)
        return scale * total, (sign * scale) * gradient
