"""Dynamic soft margin (Zhang and Rusinkiewicz, ICCV 2019): each triplet weighted by
the running CDF of d_pos - d_neg, kept as a non-trainable histogram."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.positive_slots import over_positive_slots
from keras_dml.losses.registry import register

__all__ = ["DynamicSoftMargin", "SoftMarginHistogram"]


class SoftMarginHistogram(keras.layers.Layer):
    """The running histogram of `DynamicSoftMargin`: a non-trainable float32 weight
    of `num_bins + 1` nodes (the last one holds what PML's `num_bins` entries cannot),
    saved with the model that trains the loss."""

    def __init__(self, num_bins, **kwargs):
        super().__init__(trainable=False, dtype="float32", **kwargs)
        self.num_bins = num_bins
        self.histogram = self.add_weight(shape=(num_bins + 1,), initializer="zeros",
                                         trainable=False, name="histogram")
        self.built = True

    def get_config(self):
        return {**super().get_config(), "num_bins": self.num_bins}


def _unit_distance(similarity):
    """|u - v| = sqrt(2 - 2 s) of unit vectors, and d distance / d s (0 where d = 0)."""
    distance = ops.safe_sqrt(keras.ops.maximum(2.0 - 2.0 * similarity, 0.0))
    return distance, -keras.ops.divide_no_nan(1.0, distance)


@register(row_local=False)
class DynamicSoftMargin(PairLoss):
    """Dynamic soft margin loss (Zhang and Rusinkiewicz, ICCV 2019).

    Every triplet (a, p, n) of the batch (p a positive, n a negative of anchor a)
    has x = d_ap - d_an, d the Euclidean distance of the L2-normalised embeddings
    (PML's `LpDistance(normalize_embeddings=True)`, here sqrt(2 - 2 s)). A running
    histogram h of x over nodes min_val + k Delta (Delta = 2 |min_val| / num_bins,
    linear interpolation between the two nodes around x) gives the CDF
    Phi(x) = sum_{k <= bin(x)} h_k, and with T triplets

        L = 1/T sum_{(a, p, n)} Phi(x_apn) x_apn

    whose gradient, with the histogram held constant, is the paper's: each
    triplet's dL/dx is its CDF value, a soft margin that adapts to the current
    distribution of x (the harder a triplet, the larger its weight). W is that:
    dL/dd_ap = 1/T sum_n Phi(x_apn), dL/dd_an = -1/T sum_p Phi(x_apn), times
    dd/ds = -1/d; exact w.r.t. the value with the histogram a constant (it is
    computed from the matrix without a gradient).

    The histogram, `loss.histogram` (a `SoftMarginHistogram` layer, the loss's
    `trainable_layer`), is updated at every call before the value, as PML does:
    h <- normalise((1 - m) h + m c) with c the batch's (interpolated, unnormalised)
    counts of x, and m = 1 on the first batch (h = 0). It is a non-trainable weight
    that `DMLModel` attaches to the model, so it is saved in and restored from the
    `.keras` file; eager, in a `tf.function`, under XLA and in a jitted JAX step the
    assignment is the step's own (Keras collects the non-trainable update). Every
    call advances it, evaluation and `weighting.pair_weights` included. A batch
    without a triplet leaves it unchanged and gives 0.

    pytorch-metric-learning 2.9's `DynamicSoftMarginLoss` (default `min_val=-2`,
    `num_bins=10`, `momentum=0.01`) gives the same values, call after call. Its
    gradient also runs through the histogram it just updated (which is not the
    paper's weighting), and it keeps that graph in its state, so a second
    `backward` fails; with the histogram detached its gradient is this loss's. PML
    indexes past its `num_bins` entries when x >= -min_val - Delta (an error);
    here x beyond the nodes counts at the end nodes.

    Args:
        min_val: the smallest x binned; the nodes cover [min_val, -min_val].
            Defaults to -2.0 (x lies in [-2, 2] for unit embeddings).
        num_bins: number of bins. Defaults to 10.
        momentum: the weight m of the batch's counts. Defaults to 0.01.
        miner: optional `keras_dml.mining.Miner` (its kept pairs form the triplets).

    Examples:

    >>> loss = keras_dml.losses.DynamicSoftMargin(num_bins=10, momentum=0.01)

    Reference:
        Zhang, Rusinkiewicz, "Learning Local Descriptors with a CDF-Based Dynamic
        Soft Margin", ICCV 2019.
    """

    # `momentum` is kept as `histogram_momentum` (`get_config` records it as
    # `momentum`): DMLModel reads a loss's `momentum` as a MoCo key encoder's
    config_keys = ("miner", "min_val", "num_bins")

    def __init__(self, min_val=-2.0, num_bins=10, momentum=0.01, *, miner=None,
                 reduction="sum_over_batch_size", name="dynamic_soft_margin", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.min_val = _hyper.finite("min_val", min_val)
        if self.min_val >= 0:
            raise ValueError(f"min_val must be negative (the nodes cover [min_val, -min_val]), "
                             f"got {min_val!r}.")
        self.num_bins = _hyper.integer_at_least("num_bins", num_bins, 1)
        self.histogram_momentum = _hyper.positive("momentum", momentum)
        if self.histogram_momentum > 1:
            raise ValueError(f"momentum must be in (0, 1], got {momentum!r}.")
        self.trainable_layer = SoftMarginHistogram(self.num_bins, name=f"{self.name}_histogram")

    def get_config(self):
        return {**super().get_config(), "momentum": self.histogram_momentum}

    @property
    def histogram(self):
        """The running histogram variable, (num_bins + 1,)."""
        return self.trainable_layer.histogram

    def _bins(self, x):
        """(node index, share of the next node) of each x, clipped to the nodes."""
        delta = 2.0 * abs(self.min_val) / self.num_bins
        position = keras.ops.clip((x - self.min_val) / delta, 0.0, float(self.num_bins))
        index = keras.ops.floor(position)
        return keras.ops.cast(index, "int32"), position - index

    def _batch_counts(self, distance, pairs):
        """The batch's interpolated counts of x over the nodes, and its triplet count."""
        nodes = self.num_bins + 1
        in_negative = keras.ops.cast(pairs.negative, "float32")

        def count(one_hot, active, counts, total):
            x = keras.ops.sum(distance * one_hot, axis=1, keepdims=True) - distance
            kept = keras.ops.reshape(in_negative * active[:, None], (-1,))
            index, share = self._bins(keras.ops.reshape(x, (-1,)))
            counts += keras.ops.segment_sum(kept * (1.0 - share), index, nodes)
            counts += keras.ops.segment_sum(kept * share, keras.ops.minimum(index + 1, nodes - 1),
                                            nodes)
            return counts, total + keras.ops.sum(kept)

        return over_positive_slots(pairs.positive, count,
                                   (keras.ops.zeros((nodes,)), keras.ops.zeros(())))

    def pairs(self, labels, reference, matrix):
        """The kept masks, after the histogram is updated with this batch; `context` is
        the updated CDF (num_bins + 1,)."""
        pairs = super().pairs(labels, reference, matrix)
        distance, _ = _unit_distance(keras.ops.stop_gradient(matrix))
        counts, total = self._batch_counts(distance, pairs)
        previous = keras.ops.convert_to_tensor(self.histogram)
        momentum = keras.ops.where(keras.ops.sum(previous) > 0, self.histogram_momentum,
                                   1.0)
        updated = (1.0 - momentum) * previous + momentum * counts
        normalised = keras.ops.divide_no_nan(updated, keras.ops.sum(updated))
        updated = keras.ops.where(total > 0, normalised, previous)
        self.histogram.assign(updated)
        return pairs._replace(context=keras.ops.cumsum(updated))

    def compute_terms(self, matrix, pairs):
        distance, slope = _unit_distance(matrix)
        in_negative = keras.ops.cast(pairs.negative, "float32")
        cdf = pairs.context

        def add_slot(one_hot, active, total, count, weights):
            x = keras.ops.sum(distance * one_hot, axis=1, keepdims=True) - distance
            kept = in_negative * active[:, None]
            phi = keras.ops.take(cdf, self._bins(x)[0]) * kept
            weights += one_hot * keras.ops.sum(phi, axis=1, keepdims=True) - phi
            return total + keras.ops.sum(phi * x), count + keras.ops.sum(kept), weights

        total, count, weights = over_positive_slots(
            pairs.positive, add_slot,
            (keras.ops.zeros(()), keras.ops.zeros(()), keras.ops.zeros_like(matrix)))
        share = keras.ops.divide_no_nan(1.0, count)
        return total * share, weights * slope * share
