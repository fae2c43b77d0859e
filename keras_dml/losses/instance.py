"""Instance loss (Zheng et al.): each sample classified among the batch's samples."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.losses.base import PairLoss, Pairs
from keras_dml.losses.registry import register

__all__ = ["Instance", "label_ranks"]


def label_ranks(labels):
    """int32 (N,): each label's index among the batch's distinct labels in increasing
    order (`torch.unique(labels, return_inverse=True)[1]`)."""
    labels = keras.ops.cast(labels, "int32")
    ordered = keras.ops.sort(labels)
    first = keras.ops.concatenate([keras.ops.ones((1,), "int32"),
                                   keras.ops.cast(ordered[1:] != ordered[:-1], "int32")])
    ranks = keras.ops.cumsum(first) - 1
    return keras.ops.cast(keras.ops.take(ranks, keras.ops.searchsorted(ordered, labels)),
                          "int32")


@register(example={}, reference="batch")
class Instance(PairLoss):
    """Instance loss (Zheng et al., ACM TOMM 2020), in pytorch-metric-learning's batch form.

    The paper's instance loss classifies every training image (with its captions)
    as its own class, a softmax over a weight matrix shared by the image and text
    branches (its equation numbers are not checked here: the paper is not in the
    project's papers). pytorch-metric-learning's
    `InstanceLoss` (from the authors' person re-id code) uses the batch itself as the
    classifier: with S_ij the cosine of samples i and j (the diagonal included),
    scale gamma and t_i the index of i's label among the batch's distinct labels in
    increasing order,

        L = -1/N sum_i log( e^{gamma S_{i t_i}} / sum_j e^{gamma S_ij} )

    The target t_i is a column of the batch: the loss is meant for batches whose
    rows begin with one sample of each label, in increasing label order. With
    labels `range(N)` (PML's `labels=None`) each sample's target is itself, every
    other sample pushed away (instance discrimination). With two views stacked
    along the batch, rows [Z; Z'] and labels [range(P), range(P)], each view's
    target is the first view of its instance. On other batches (a C x k batch of
    classes, `two_view_batches`' interleaved rows) the target is a sample of
    another label, as in PML. The pairs it reports (`pair_weights`) are the target
    (positive) and every other column (negative). The gradient is exact.

    Args:
        gamma: the scale of the cosines. Defaults to 64 (PML's).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Examples:

    >>> loss = keras_dml.losses.Instance(gamma=64)
    >>> value = loss(numpy.arange(8), embeddings)   # doctest: +SKIP

    Reference:
        Zheng, Zheng, Garrett, Yang, Xu, Shen, "Dual-Path Convolutional Image-Text
        Embeddings with Instance Loss", ACM TOMM 2020.
    """

    metrics = ("cosine",)
    config_keys = ("gamma",)

    def __init__(self, gamma=64.0, *, reduction="sum_over_batch_size", name="instance",
                 dtype=None):
        super().__init__(metric="cosine", miner=None, reduction=reduction, name=name,
                         dtype=dtype)
        self.gamma = float(_hyper.positive("gamma", gamma))

    def check_reference(self, reference, embeddings):
        raise ValueError("Instance classifies each sample among the batch's own samples: it "
                         f"takes no reference set, got {type(reference).__name__}.")

    def pairs(self, labels, reference, matrix):
        """Each sample's target column t_i is its positive, every other column a negative."""
        targets = label_ranks(labels)
        positive = keras.ops.cast(keras.ops.one_hot(targets, keras.ops.shape(matrix)[1]),
                                  "bool")
        return Pairs(labels, reference.labels, positive, keras.ops.logical_not(positive),
                     context=targets)

    def compute_terms(self, matrix, pairs):
        value, probabilities, _ = ops.scaled_softmax(matrix, pairs.context, self.gamma)
        # the target's gradient gamma (p_t - 1) as -gamma sum_{j != t} p_j: exact where
        # p_t rounds to 1 (a sample's own column, cosine 1, at gamma 64)
        others = keras.ops.where(pairs.positive, 0.0, probabilities)
        return value, keras.ops.where(pairs.positive,
                                      -keras.ops.sum(others, axis=1, keepdims=True),
                                      probabilities)
