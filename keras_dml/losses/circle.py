"""Circle loss (Sun et al. CVPR 2020), pair form."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["Circle"]


def circle_terms(matrix, positive, negative, margin, gamma):
    """Per-anchor circle loss and its pair weights on a similarity matrix.

        a_ij = -gamma [1 + m - s_ij]_+ (s_ij - (1 - m))   (j positive)
        a_ij =  gamma [s_ij + m]_+     (s_ij - m)         (j negative)
        L_i  = softplus( LSE_{j in P_i} a_ij + LSE_{j in N_i} a_ij )

    The weighting factors [.]_+ are constants in back-propagation (paper section
    3.1, "alpha is regarded as a constant"), so

        dL_i/ds_ij = sigmoid(x_i) softmax_{P_i}(a_i)_j (-gamma [1 + m - s_ij]_+)  (j in P_i)
        dL_i/ds_ij = sigmoid(x_i) softmax_{N_i}(a_i)_j ( gamma [s_ij + m]_+)      (j in N_i)

    with x_i the softplus argument. Anchors without a positive or a negative give 0.
    """
    pull_scale = -gamma * keras.ops.stop_gradient(keras.ops.relu(1.0 + margin - matrix))
    push_scale = gamma * keras.ops.stop_gradient(keras.ops.relu(matrix + margin))
    pull_lse, pull_softmax, has_pull = ops.masked_softmax_parts(
        pull_scale * (matrix - (1.0 - margin)), positive)
    push_lse, push_softmax, has_push = ops.masked_softmax_parts(
        push_scale * (matrix - margin), negative)
    both = keras.ops.logical_and(has_pull, has_push)[:, 0]
    total = pull_lse + push_lse
    value = keras.ops.where(both, keras.ops.softplus(total), 0.0)
    gate = keras.ops.where(both, keras.ops.sigmoid(total), 0.0)[:, None]
    weights = gate * (pull_softmax * pull_scale + push_softmax * push_scale)
    return value, weights


@register()
class Circle(PairLoss):
    """Circle loss, pair form (Sun et al. CVPR 2020, eq. 6 with eq. 7-8).

    With s_p, s_n the cosine similarities of an anchor to its positives and
    negatives, optima O_p = 1 + m, O_n = -m and margins Delta_p = 1 - m,
    Delta_n = m (eq. 8):

        L_i = log(1 + sum_{j in P_i} exp(-gamma alpha_p^j (s_p^j - Delta_p))
                        sum_{k in N_i} exp( gamma alpha_n^k (s_n^k - Delta_n)))

    with alpha_p = [O_p - s_p]_+ and alpha_n = [s_n - O_n]_+ (eq. 7), treated as
    constants in back-propagation. The batch loss is the mean over anchors;
    anchors without a positive or a negative contribute 0 (pytorch-metric-
    learning averages over the other anchors only, so the two agree on every batch
    where each sample has a positive and a negative, e.g. C x k batches with k >= 2).

    `keras.losses.Circle(gamma, margin)` computes the same value on L2-normalised
    embeddings, written on cosine distances d = 1 - s: its `optim_pos` m + d is
    1 + m - s = alpha_p, and `delta_pos - d` is s - Delta_p (likewise for the
    negatives). Two differences: Keras differentiates through alpha_p and
    alpha_n (the paper and this loss do not), so the gradients differ; and Keras
    expects L2-normalised inputs, this loss normalises them itself.

    Args:
        margin: the relaxation m. Defaults to 0.4.
        gamma: the scale. Defaults to 80. (Paper: m = 0.25, gamma = 256 for faces,
            128 for re-identification; m = 0.4, gamma = 80 for fine-grained
            retrieval, the defaults of pytorch-metric-learning and Keras.)
        miner: optional `keras_dml.mining.Miner`.

    Examples:

    >>> loss = keras_dml.losses.Circle(margin=0.25, gamma=256)

    Reference:
        Sun et al., "Circle Loss: A Unified Perspective of Pair Similarity
        Optimization", CVPR 2020.
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    def __init__(self, margin=0.4, gamma=80.0, *, miner=None, reduction="sum_over_batch_size",
                 name="circle", dtype=None):
        super().__init__(metric="cosine", miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.margin = _hyper.finite("margin", margin)
        self.gamma = _hyper.positive("gamma", gamma)

    def compute_terms(self, matrix, pairs):
        return circle_terms(matrix, pairs.positive, pairs.negative, self.margin, self.gamma)

    def get_config(self):
        config = super().get_config()
        config.pop("metric")
        config.update(margin=self.margin, gamma=self.gamma)
        return config
