"""The heads that turn any backbone into an embedder: pooling, projection, L2 norm."""

import keras

from keras_dml import hyperparameters
from keras_dml.layers.pooling import GeneralizedMeanPooling
from keras_dml.ops import NORM_EPSILON

__all__ = ["EmbeddingHead", "L2Normalize", "MultiLevelEmbedding"]

_POOLINGS = ("avg", "max", "gem")


@keras.saving.register_keras_serializable(package="keras_dml")
class L2Normalize(keras.layers.Layer):
    """Scale each vector to unit L2 norm (zero vectors stay zero), in float32."""

    def __init__(self, axis=-1, epsilon=NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.axis, self.epsilon = axis, float(epsilon)

    def call(self, inputs):
        inputs = keras.ops.cast(inputs, "float32")
        squared = keras.ops.sum(keras.ops.square(inputs), axis=self.axis, keepdims=True)
        return inputs * keras.ops.rsqrt(keras.ops.maximum(squared, self.epsilon))

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
        pooling: "avg", "max" or "gem" (`GeneralizedMeanPooling`, learnable p
            initialised to 3). Defaults to "avg".
        normalize: L2-normalise the output. Defaults to True.
        kernel_initializer: for the projection. Defaults to "glorot_uniform".
        embedding_regularizer: a Keras regularizer of the projected embeddings
            before L2 normalisation (e.g. `keras_dml.layers.LpNorm(1e-3)`,
            PML's LpRegularizer); its term is added to the loss. Defaults to None.

    Examples:

    >>> backbone = keras.applications.ResNet50(weights=None, include_top=False,
    ...                                        input_shape=(224, 224, 3))
    >>> outputs = keras_dml.layers.EmbeddingHead(512)(backbone.output)
    >>> model = keras_dml.models.DMLModel(backbone.input, outputs)
    """

    def __init__(self, dim, pooling="avg", normalize=True, kernel_initializer="glorot_uniform",
                 embedding_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        dim = hyperparameters.integer_at_least("dim", dim, 1)
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}.")
        self.dim, self.pooling, self.normalize = int(dim), pooling, bool(normalize)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.embedding_regularizer = keras.regularizers.get(embedding_regularizer)
        self.projection = keras.layers.Dense(
            self.dim, kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy,
            activity_regularizer=self.embedding_regularizer, name="projection",
        )
        self.l2 = L2Normalize(name="l2_normalize")
        self.gem = GeneralizedMeanPooling(name="gem") if pooling == "gem" else None

    def build(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(
                f"EmbeddingHead needs inputs of rank >= 2 (batch, ..., channels), got shape "
                f"{tuple(input_shape)}."
            )
        if self.gem is not None and len(input_shape) > 2:
            self.gem.build(input_shape)
        self.projection.build((None, input_shape[-1]))
        self.l2.build((None, self.dim))  # weightless, but built: the model is, as a whole

    def _pool(self, inputs):
        axes = tuple(range(1, len(inputs.shape) - 1))
        if not axes:
            return inputs
        if self.gem is not None:
            return self.gem(inputs)
        reduce = keras.ops.mean if self.pooling == "avg" else keras.ops.max
        return reduce(inputs, axis=axes)

    def call(self, inputs):
        embeddings = self.projection(self._pool(inputs))
        return self.l2(embeddings) if self.normalize else keras.ops.cast(embeddings, "float32")

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
            "embedding_regularizer": keras.regularizers.serialize(self.embedding_regularizer),
        }


@keras.saving.register_keras_serializable(package="keras_dml")
class MultiLevelEmbedding(keras.layers.Layer):
    """One `EmbeddingHead` per feature map, concatenated and L2-normalised.

    The multi-level embedding of the ICE-(L, M, H) and RLL-(L, M, H) rows of the
    ICE paper's Table 3: feature maps from a low, a mid and a high layer of the
    backbone each get their own pooling + Dense (+ L2) head, and the concatenated
    vector is L2-normalised, so retrieval compares all levels at once. Call it on a
    list of feature maps; `keras_dml.backbones.multi_level_embedder` wires it onto a
    backbone by layer names.

    Args:
        dims: embedding size of each level's head, one int per input feature map.
        pooling: "avg" or "max" global pooling in every head. Defaults to "avg".
        normalize_levels: L2-normalise each level before concatenating, so every
            level weighs the same in the cosine similarity. Defaults to True.

    Examples:

    >>> levels = keras_dml.backbones.RESNET50_LEVELS
    >>> maps = [backbone.get_layer(n).output for n in levels]  # doctest: +SKIP
    >>> embeddings = keras_dml.layers.MultiLevelEmbedding([512, 512, 512])(maps)  # doctest: +SKIP

    Reference:
        Wang et al., "Instance Cross Entropy for Deep Metric Learning", 2019
        (section 4.2, Table 3); Wang et al., "Ranked List Loss", CVPR 2019.
    """

    def __init__(self, dims, pooling="avg", normalize_levels=True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(dims, (int, float, str)) or not len(dims):
            raise ValueError(
                f"dims must be a non-empty list with one embedding size per level, got {dims!r}."
            )
        self.dims = [int(d) for d in dims]
        self.pooling, self.normalize_levels = pooling, bool(normalize_levels)
        self.heads = [
            EmbeddingHead(dim, pooling=pooling, normalize=self.normalize_levels,
                          dtype=self.dtype_policy, name=f"level_{i}")
            for i, dim in enumerate(self.dims)
        ]
        self.l2 = L2Normalize(name="l2_normalize")

    def _check_levels(self, shapes):
        if not isinstance(shapes, (list, tuple)) or len(shapes) != len(self.dims):
            count = len(shapes) if isinstance(shapes, (list, tuple)) else 1
            raise ValueError(
                f"MultiLevelEmbedding has {len(self.dims)} heads (dims={self.dims}) but was "
                f"given {count} feature map(s)."
            )

    def build(self, input_shape):
        self._check_levels(input_shape)
        for head, shape in zip(self.heads, input_shape):
            head.build(shape)
        self.l2.build((None, sum(self.dims)))

    def call(self, inputs):
        self._check_levels(inputs)
        levels = [head(x) for head, x in zip(self.heads, inputs)]
        return self.l2(keras.ops.concatenate(levels, axis=-1))

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], sum(self.dims))

    def compute_output_spec(self, inputs):
        return keras.KerasTensor((inputs[0].shape[0], sum(self.dims)), dtype="float32")

    def get_config(self):
        return {
            **super().get_config(),
            "dims": list(self.dims),
            "pooling": self.pooling,
            "normalize_levels": self.normalize_levels,
        }
