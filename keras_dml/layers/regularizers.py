"""Embedding regularisers, as Keras regularizers (`activity_regularizer` or
`EmbeddingHead(embedding_regularizer=...)`)."""

import keras

from keras_dml import hyperparameters

__all__ = ["LpNorm"]


@keras.saving.register_keras_serializable(package="keras_dml")
class LpNorm(keras.regularizers.Regularizer):
    """weight * sum over the batch of ||x_i||_p^power: PML's `LpRegularizer` as an
    activity regulariser.

    Keras divides an activity regulariser's value by the batch size, so the term
    added to the loss is weight * mean_i ||x_i||_p^power, PML's value.

    Keeps unnormalised embeddings from growing; put it on the pre-normalisation
    projection with `EmbeddingHead(dim, embedding_regularizer=LpNorm(1e-3))`
    (an L2-normalised output has norm 1, so a penalty there is a constant).
    `DMLModel` adds the term to the loss it reports and trains on.

    Args:
        weight: multiplier. Defaults to 1.0 (PML's default; 1e-3 - 1e-2 is usual).
        p: the norm's order. Defaults to 2.
        power: exponent of the norm. Defaults to 1.
    """

    def __init__(self, weight=1.0, p=2.0, power=1.0):
        self.weight = hyperparameters.non_negative("weight", weight)
        self.p = hyperparameters.positive("p", p)
        self.power = hyperparameters.positive("power", power)

    def __call__(self, x):
        x = keras.ops.reshape(keras.ops.cast(x, "float32"), (keras.ops.shape(x)[0], -1))
        if self.p == 2.0:
            squared = keras.ops.sum(keras.ops.square(x), axis=1)
            norms = keras.ops.sqrt(keras.ops.maximum(squared, 1e-24))
        else:
            powers = keras.ops.power(keras.ops.abs(x) + 1e-12, self.p)
            norms = keras.ops.power(keras.ops.sum(powers, axis=1), 1.0 / self.p)
        return self.weight * keras.ops.sum(keras.ops.power(norms, self.power))

    def get_config(self):
        return {"weight": self.weight, "p": self.p, "power": self.power}
