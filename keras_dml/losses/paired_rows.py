"""`PairedRows`: losses whose every row is two embeddings side by side, (N, 2 d)."""

import keras

from keras_dml import ops
from keras_dml.losses.base import Reference

__all__ = ["PairedRows"]


class PairedRows:
    """Mixin of a `PairLoss` whose rows are two embeddings concatenated along the
    features, shape (N, 2 d): its matrix is the loss's metric between the first halves
    (the queries) and the second halves (the keys) of the rows.

    A subclass names what a row holds in `row_pair` (for the error on an odd width).
    """

    row_pair = "a pair of embeddings"

    def check(self, labels, embeddings):
        labels, embeddings = super().check(labels, embeddings)
        width = embeddings.shape[1]
        if width is not None and width % 2:
            raise ValueError(
                f"{type(self).__name__} needs each row to be {self.row_pair} "
                f"concatenated along the features, shape (N, 2 d); got width {width}, "
                "which is odd.")
        return labels, embeddings

    def default_reference(self, labels, embeddings):
        """The keys: the second half of each row (split in `pair_matrix`)."""
        return Reference(labels, embeddings, trainable=True)

    def pair_matrix(self, embeddings, reference):
        queries = keras.ops.split(embeddings, 2, axis=1)[0]
        keys = keras.ops.split(reference.embeddings, 2, axis=1)[1]
        return ops.pairwise(queries, keys, metric=self.metric)
