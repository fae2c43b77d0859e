"""Multiple-negatives ranking loss: (query, positive) pairs with in-batch negatives."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss, Pairs
from keras_dml.losses.paired_rows import PairedRows
from keras_dml.losses.registry import register

__all__ = ["MultipleNegativesRanking"]


def ranking_terms(logits, negative):
    """Per query, -log softmax of its own (diagonal) logit against itself and its
    negatives, and the exact derivative d value / d logits: softmax - [j = i].

    NCA's terms (`keras_dml.losses.nca.nca_terms`) with one positive per row, the
    diagonal: its log-sum-exp over the positives is the diagonal logit itself, so
    one masked softmax serves.
    """
    pool = primitives.set_diagonal(negative, keras.ops.ones_like(keras.ops.diagonal(negative)))
    lse, softmax = ops.masked_logsumexp_and_softmax(logits, pool)
    return (lse - keras.ops.diagonal(logits),
            primitives.set_diagonal(softmax, keras.ops.diagonal(softmax) - 1.0))


# Up to this scale the diagonal's softmax probability, at least exp(-2 s) / N for
# cosine logits in [-s, s], stays a normal float32 for any batch that fits in memory.
ONE_SOFTMAX_MAX_SCALE = 32.0


def one_softmax_values(queries, documents, labels, scale):
    """Per query, -log softmax_j(s cos(q_i, d_j))_i over its pool: document i and the
    documents of other labels.

    The engine's values and exact gradient for the default pairs, in fewer passes over
    the (N, N) matrix: the value is read off the softmax's diagonal, the gradient of
    the logits (softmax - I) is applied as `P @ d - d` and `P^T @ q - q`, so no (N, N)
    pass follows the softmax, and label masks are built only for a batch with
    duplicate labels. Needs `scale <= ONE_SOFTMAX_MAX_SCALE`.
    """

    @keras.ops.custom_gradient
    def values(units_q, units_d):
        logits = primitives.matmul(scale * units_q, units_d, transpose_b=True)
        logits = keras.ops.cond(_all_distinct(labels), lambda: logits,
                                lambda: _without_duplicates(logits, labels))
        probabilities = keras.ops.softmax(logits)
        # One label: every pool is the query's own document, value and gradient 0
        # exactly (a fused softmax may round that lone probability to 1 - 2^-24).
        one_label = keras.ops.min(labels) == keras.ops.max(labels)

        def gradient(*args, upstream=None):
            # TensorFlow and JAX pass the upstream gradient; PyTorch the inputs and it
            upstream = args[0] if upstream is None else upstream
            upstream = keras.ops.where(one_label, 0.0, upstream)
            row_scale = scale * upstream[:, None]
            weighted_q = row_scale * units_q
            return (row_scale * (keras.ops.matmul(probabilities, units_d) - units_d),
                    primitives.matmul(probabilities, weighted_q, transpose_a=True) - weighted_q)

        value = -keras.ops.log(keras.ops.diagonal(probabilities))
        return keras.ops.where(one_label, 0.0, value), gradient

    return values(ops.l2_normalize(queries), ops.l2_normalize(documents))


def _all_distinct(labels):
    ordered = keras.ops.sort(labels)
    return keras.ops.all(ordered[1:] != ordered[:-1])


def _without_duplicates(logits, labels):
    """-inf where a document shares the query's label but is not its own."""
    duplicate, _ = ops.label_masks(labels)  # same label, the diagonal excluded
    return keras.ops.where(duplicate, -float("inf"), logits)


@register(reference="batch")
class MultipleNegativesRanking(PairedRows, PairLoss):
    """Multiple-negatives ranking loss (Henderson et al. 2017, eq. 3; sentence-transformers).

    Each row of the embeddings is one (query, positive) pair, the query and the
    positive concatenated along the features: shape (N, 2 d), e.g. the output of a
    two-tower model `Concatenate()([query_tower(q), document_tower(p)])`. With
    S_ij = cos(q_i, p_j) and scale s, every other row's positive is a negative:

        L = 1/N sum_i -log( exp(s S_ii) / sum_{j} exp(s S_ij) )

    With `symmetric=True` the documents also retrieve their queries, and the loss
    is the mean of both directions (sentence-transformers'
    MultipleNegativesSymmetricRankingLoss; a batch-global scalar then):

        L = 1/2N sum_i [ -log softmax_j(s S_i.)_i - log softmax_j(s S_.i)_i ]

    Labels are pair (item) ids: another row with the same label is a duplicate of
    the same item, and its positive is not used as a negative. With distinct
    labels (`range(N)`) this is exactly the loss above. Gradients are exact.

    Args:
        scale: s. Defaults to 20 (sentence-transformers').
        symmetric: add the document-to-query direction. Defaults to False.

    Examples:

    >>> q = keras.Input((64,)); p = keras.Input((64,))
    >>> tower = keras.Sequential([keras.layers.Dense(32)])   # or two different towers
    >>> pairs = keras.layers.Concatenate()([tower(q), tower(p)])
    >>> model = keras_dml.models.DMLModel([q, p], pairs)
    >>> model.compile("adam", loss=keras_dml.losses.MultipleNegativesRanking())
    >>> model.fit((queries, positives), numpy.arange(len(queries)), batch_size=64)  # doctest: +SKIP

    Reference:
        Henderson et al., "Efficient Natural Language Response Suggestion for Smart
        Reply", 2017; Reimers & Gurevych, sentence-transformers.
    """

    row_pair = "a (query, positive) pair"

    def __init__(self, scale=20.0, symmetric=False, *, reduction="sum_over_batch_size",
                 name="multiple_negatives_ranking", dtype=None):
        super().__init__(metric="cosine", miner=None, reduction=reduction, name=name,
                         dtype=dtype)
        self.scale = _hyper.positive("scale", scale)
        self.symmetric = _hyper.boolean("symmetric", symmetric)

    def against(self, labels, embeddings, reference):
        """The engine's values; for the default pairs (one direction, a scale up to
        `ONE_SOFTMAX_MAX_SCALE`) the same from one softmax (`one_softmax_values`)."""
        default = (reference.labels is labels and reference.embeddings is embeddings
                   and reference.rows is None and reference.own is None)
        if self.symmetric or not default or self.scale > ONE_SOFTMAX_MAX_SCALE:
            return super().against(labels, embeddings, reference)
        queries, documents = keras.ops.split(embeddings, 2, axis=1)
        return one_softmax_values(queries, documents, labels, self.scale)

    def pairs(self, labels, reference, matrix):
        """Query i's positive is document i; documents of other labels are negatives."""
        same = keras.ops.equal(labels[:, None], reference.labels[None, :])
        positive = primitives.set_diagonal(keras.ops.zeros_like(same), keras.ops.diagonal(same))
        return Pairs(labels, reference.labels, positive, keras.ops.logical_not(same))

    def compute_terms(self, matrix, pairs):
        value, weights = ranking_terms(self.scale * matrix, pairs.negative)
        if not self.symmetric:
            return value, self.scale * weights
        back_value, back_weights = ranking_terms(self.scale * keras.ops.transpose(matrix),
                                                 keras.ops.transpose(pairs.negative))
        count = 2.0 * keras.ops.cast(keras.ops.shape(matrix)[0], "float32")
        total = (keras.ops.sum(value) + keras.ops.sum(back_value)) / count
        return total, self.scale * (weights + keras.ops.transpose(back_weights)) / count

    def get_config(self):
        config = super().get_config()
        for key in ("metric", "miner"):
            config.pop(key)
        config.update(scale=self.scale, symmetric=self.symmetric)
        return config
