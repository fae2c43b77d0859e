"""Neighbourhood components analysis (NCA) loss with a scale parameter."""

import keras

from keras_dml import ops
from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["NCA", "nca_terms"]


def nca_terms(logits, positive, negative):
    """Per-anchor NCA value on logits z and its exact derivative d value / d z.

        L_a = -log( sum_{k in P_a} exp(z_ak) / sum_{k in P_a u N_a} exp(z_ak) )
            = logsumexp_{P_a u N_a}(z_a) - logsumexp_{P_a}(z_a)

        dL_a/dz_aj = softmax_{P_a u N_a}(z_a)_j - [j in P_a] softmax_{P_a}(z_a)_j

    i.e. MS supplementary eq. 2 with the signs of a loss to minimise. An anchor
    without a positive has value 0 and zero weights.
    """
    positive_lse, positive_softmax, has_positive = ops.masked_softmax_parts(logits, positive)
    pool_lse, pool_softmax, _ = ops.masked_softmax_parts(
        logits, keras.ops.logical_or(positive, negative), rows=has_positive)
    return pool_lse - positive_lse, pool_softmax - positive_softmax


@register()
class NCA(PairLoss):
    """NCA loss (Salakhutdinov and Hinton 2007), MS supplementary eq. 1-2.

    The soft nearest-neighbour classifier's log-likelihood of each anchor's own
    class, on logits z_ak = scale * S_ak (or -scale * D_ak for a distance):

        L = 1/N sum_a -log( sum_{y_k = y_a, k != a} exp(z_ak) / sum_{k != a} exp(z_ak) )

    (eq. 1 written as a loss to minimise, mean over anchors). Its pair weights are
    the exact derivatives, eq. 2 times the scale:

        w_aj+ = scale (e^{z_aj} / sum_{y_k = y_a} e^{z_ak} - e^{z_aj} / sum_k e^{z_ak})
        w_aj- = scale  e^{z_aj} / sum_k e^{z_ak}

    (divided by N after the mean). With a miner, both sums run over the kept pairs.
    Anchors without a positive in the batch contribute 0.

    Args:
        scale: multiplies the similarities (divides a temperature). Defaults to 2.0:
            on L2-normalised embeddings this is the original NCA's
            exp(-||f_a - f_k||^2) (= pytorch-metric-learning's `NCALoss()`), since
            ||f_a - f_k||^2 = 2 - 2 S_ak. `scale=1.0` is eq. 1 as the MS supplementary
            writes it, and learns less on Omniglot (docs/reproductions.md).
        metric: "cosine", "dot", "euclidean" or "squared_euclidean" (the original
            NCA: exp(-scale ||f_a - f_k||^2)). Defaults to "cosine", the MS
            supplementary's S. On L2-normalised embeddings "squared_euclidean" with
            scale s equals "cosine" with scale 2s.
        miner: optional `keras_dml.mining.Miner`. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.NCA(scale=16.0)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Salakhutdinov and Hinton, "Learning a Nonlinear Embedding by Preserving
        Class Neighbourhood Structure", AISTATS 2007; MS supplementary eq. 1-2.
    """

    xla_terms = True  # its terms fused by XLA (PairLoss.xla_terms)
    row_blocks = True  # large batches a block of rows at a time (PairLoss.row_blocks)

    config_keys = PairLoss.config_keys + ("scale",)

    def __init__(self, scale=2.0, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="nca", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.scale = _hyper.positive("scale", scale)

    def compute_terms(self, matrix, pairs):
        sign = -1.0 if self.is_distance else 1.0
        value, weights = nca_terms(sign * self.scale * matrix, pairs.positive, pairs.negative)
        return value, sign * self.scale * weights
