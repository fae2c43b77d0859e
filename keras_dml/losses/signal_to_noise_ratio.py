"""Contrastive loss on the signal-to-noise ratio distance (Yuan et al., CVPR 2019)."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["SignalToNoiseRatioContrastive", "snr_distances"]


def snr_distances(query, key=None, normalize=True):
    """d_ij = var(x_j - x_i) / var(x_i), the SNR distance of every query to every key.

    With c = x - mean(x) (each row centred over its d dimensions), var(x_j - x_i) =
    ||c_i - c_j||^2 / d and var(x_i) = ||c_i||^2 / d (the same divisor, d or d - 1,
    cancels): d_ij is the engine's squared Euclidean distance between the centred
    rows, over the anchor's squared centred norm (held at 1e-12, so a constant
    embedding gives a large finite distance, not inf).

    Args:
        query: float (N, d).
        key: float (M, d), or None for the query itself.
        normalize: L2-normalise the embeddings first (pytorch-metric-learning's
            `SNRDistance()` does).
    """
    def centred(x):
        x = ops.l2_normalize(ops.to_float32(x)) if normalize else ops.to_float32(x)
        return x - keras.ops.mean(x, axis=1, keepdims=True)

    query = centred(query)
    noise = ops.pairwise(query, None if key is None else centred(key),
                         metric="squared_euclidean")
    signal = keras.ops.sum(keras.ops.square(query), axis=1, keepdims=True)
    return noise / keras.ops.maximum(signal, ops.NORM_EPSILON)


@register(row_local=False)
class SignalToNoiseRatioContrastive(PairLoss):
    """Contrastive loss on the SNR distance (Yuan, Chen, Yang, Zhang, Hu, Li, CVPR 2019).

    The SNR distance of an anchor x_i to x_j is the variance of the noise x_j - x_i
    over the variance of the signal x_i (the paper's eq. 6, the reciprocal of the
    signal-to-noise ratio): d_ij = var(x_j - x_i) / var(x_i), not symmetric. The
    contrastive loss on it, as pytorch-metric-learning 2.9's
    `SignalToNoiseRatioContrastiveLoss` (a `ContrastiveLoss` with `SNRDistance`):

        L = mean_{(i,j) in P, h > 0} [d_ij - pos_margin]_+
          + mean_{(i,j) in N, h > 0} [neg_margin - d_ij]_+

    each mean over the pairs whose hinge h is non-zero (PML's `AvgNonZeroReducer`;
    an empty set gives 0), over ordered pairs. Unsquared hinges, as PML (the
    paper's eq. 9 squares neither). Batch-global: a scalar value and W = d value /
    d D, 1 / count on active positives and -1 / count on active negatives.

    The engine's metrics do not include the SNR distance: this loss builds its
    matrix itself (`snr_distances`) from the engine's squared Euclidean distance
    between the mean-centred rows, divided by each anchor's squared centred norm,
    so the engine differentiates through it as through any matrix. `metric` is
    "snr" only. The paper's regulariser (the embeddings' mean held at 0) is not
    included, as in PML: add it as an embedding regulariser.

    Args:
        pos_margin: Defaults to 0 (PML's default).
        neg_margin: Defaults to 1 (PML's default).
        normalize: L2-normalise the embeddings before the SNR distance, as PML's
            `SNRDistance()` does by default. Defaults to True.
        miner: optional `keras_dml.mining.Miner` (it sees -D as the similarity).

    Examples:

    >>> loss = keras_dml.losses.SignalToNoiseRatioContrastive(pos_margin=0, neg_margin=1)

    Reference:
        Yuan, Chen, Yang, Zhang, Hu, Li, "Signal-To-Noise Ratio: A Robust Distance
        Metric for Deep Metric Learning", CVPR 2019.
    """

    default_metric = "snr"
    metrics = ("snr",)
    config_keys = ("miner", "pos_margin", "neg_margin", "normalize")

    def __init__(self, pos_margin=0.0, neg_margin=1.0, normalize=True, *, miner=None,
                 reduction="sum_over_batch_size", name="snr_contrastive", dtype=None):
        super().__init__(metric="snr", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.pos_margin = _hyper.finite("pos_margin", pos_margin)
        self.neg_margin = _hyper.finite("neg_margin", neg_margin)
        self.normalize = _hyper.boolean("normalize", normalize)

    @property
    def is_distance(self):
        return True

    def pair_matrix(self, embeddings, reference):
        if reference.rows is not None:
            raise ValueError("SignalToNoiseRatioContrastive takes the batch or a whole key "
                             "set as its reference set, not rows drawn from the batch.")
        if reference.is_batch:
            return snr_distances(embeddings, normalize=self.normalize)
        keys = reference.embeddings
        keys = keys if reference.trainable else keras.ops.stop_gradient(keys)
        return snr_distances(embeddings, keys, normalize=self.normalize)

    def compute_terms(self, matrix, pairs):
        pull = keras.ops.where(pairs.positive, keras.ops.relu(matrix - self.pos_margin), 0.0)
        push = keras.ops.where(pairs.negative, keras.ops.relu(self.neg_margin - matrix), 0.0)
        pulled = keras.ops.cast(pull > 0.0, "float32")
        pushed = keras.ops.cast(push > 0.0, "float32")
        pull_count, push_count = keras.ops.sum(pulled), keras.ops.sum(pushed)
        value = (keras.ops.divide_no_nan(keras.ops.sum(pull), pull_count)
                 + keras.ops.divide_no_nan(keras.ops.sum(push), push_count))
        weights = (keras.ops.divide_no_nan(pulled, pull_count)
                   - keras.ops.divide_no_nan(pushed, push_count))
        return value, weights
