"""Layers that turn any backbone into an embedder."""

import keras
from keras import ops

_POOLINGS = ("avg", "max")


@keras.saving.register_keras_serializable(package="keras_dml")
class L2Normalize(keras.layers.Layer):
    """Scale each vector to unit L2 norm (zero vectors stay zero), in float32."""

    def __init__(self, axis=-1, epsilon=1e-12, **kwargs):
        super().__init__(**kwargs)
        self.axis, self.epsilon = axis, float(epsilon)

    def call(self, inputs):
        inputs = ops.cast(inputs, "float32")
        squared = ops.sum(ops.square(inputs), axis=self.axis, keepdims=True)
        return inputs * ops.rsqrt(ops.maximum(squared, self.epsilon))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="keras_dml")
class EmbeddingHead(keras.layers.Layer):
    """Global pooling (for feature maps) + Dense + L2 normalisation.

    Put it on any backbone: a feature map (batch, H, W, C) or sequence (batch, T, C)
    is pooled over its spatial axes first; a vector (batch, C) goes straight to the
    Dense projection. The output is float32 even under a mixed precision policy,
    so losses and retrieval see full-precision unit vectors.

    Args:
        dim: embedding size.
        pooling: "avg" or "max". Defaults to "avg".
        normalize: L2-normalise the output. Defaults to True.
        kernel_initializer: for the projection. Defaults to "glorot_uniform".

    Examples:

    >>> backbone = keras.applications.ResNet50(weights=None, include_top=False,
    ...                                        input_shape=(224, 224, 3))
    >>> outputs = keras_dml.layers.EmbeddingHead(512)(backbone.output)
    >>> model = keras_dml.models.DMLModel(backbone.input, outputs)
    """

    def __init__(self, dim, pooling="avg", normalize=True, kernel_initializer="glorot_uniform",
                 **kwargs):
        super().__init__(**kwargs)
        if int(dim) <= 0:
            raise ValueError(f"dim must be a positive integer, got {dim!r}.")
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}.")
        self.dim, self.pooling, self.normalize = int(dim), pooling, bool(normalize)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.projection = keras.layers.Dense(
            self.dim, kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy,
            name="projection",
        )
        self.l2 = L2Normalize(name="l2_normalize")

    def build(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(
                f"EmbeddingHead needs inputs of rank >= 2 (batch, ..., channels), got shape "
                f"{tuple(input_shape)}."
            )
        self.projection.build((None, input_shape[-1]))

    def _pool(self, inputs):
        axes = tuple(range(1, len(inputs.shape) - 1))
        if not axes:
            return inputs
        reduce = ops.mean if self.pooling == "avg" else ops.max
        return reduce(inputs, axis=axes)

    def call(self, inputs):
        embeddings = self.projection(self._pool(inputs))
        return self.l2(embeddings) if self.normalize else ops.cast(embeddings, "float32")

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.dim)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((inputs.shape[0], self.dim), dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "dim": self.dim,
            "pooling": self.pooling,
            "normalize": self.normalize,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
        }
