"""Layers that turn any backbone into an embedder."""

import keras

from keras_dml import hyperparameters
from keras_dml.backbone_families import FAMILIES
from keras_dml.batch_norm import FusedBatchNormalization  # noqa: F401 (public here)
from keras_dml.convolution import ShiftedConv2D  # noqa: F401 (public here)
from keras_dml.ops import NORM_EPSILON
from keras_dml.pooling import TiledMaxPooling2D  # noqa: F401 (public here)

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
class GeneralizedMeanPooling(keras.layers.Layer):
    """Generalised-mean (GeM) global pooling with a learnable exponent p, in float32.

        f_k = ( 1/|X_k| sum_{x in X_k} max(x, eps)^p )^(1/p)

    over the spatial positions X_k of channel k (Radenovic, Tolias, Chum, TPAMI
    2018, eq. 3): p = 1 is average pooling, p -> inf max pooling. p is one
    trainable scalar shared by all channels (the paper's choice), initialised to 3
    and held at >= 1 in the forward pass. Input (batch, ..., channels) of rank >= 3,
    output (batch, channels).

    Args:
        p: initial exponent. Defaults to 3.0.
        trainable_p: learn p. Defaults to True.
        epsilon: the clamp of the activations. Defaults to 1e-6.
    """

    def __init__(self, p=3.0, trainable_p=True, epsilon=1e-6, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.initial_p = hyperparameters.positive("p", p)
        if self.initial_p < 1.0:
            raise ValueError(f"p must be >= 1, got {p!r}.")
        self.trainable_p = bool(trainable_p)
        self.epsilon = hyperparameters.positive("epsilon", epsilon)

    def build(self, input_shape):
        if len(input_shape) < 3:
            raise ValueError("GeneralizedMeanPooling needs inputs (batch, ..., channels) of "
                             f"rank >= 3, got shape {tuple(input_shape)}.")
        self.p = self.add_weight(name="p", shape=(),
                                 initializer=keras.initializers.Constant(self.initial_p),
                                 trainable=self.trainable_p)

    def call(self, inputs):
        p = keras.ops.maximum(keras.ops.cast(self.p, "float32"), 1.0)
        x = keras.ops.maximum(keras.ops.cast(inputs, "float32"), self.epsilon)
        axes = tuple(range(1, len(inputs.shape) - 1))
        return keras.ops.power(keras.ops.mean(keras.ops.power(x, p), axis=axes), 1.0 / p)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "p": self.initial_p, "trainable_p": self.trainable_p,
                "epsilon": self.epsilon}


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
            before L2 normalisation (e.g. `keras_dml.regularizers.LpNorm(1e-3)`,
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


# -- multi-level embeddings (ICE / RLL "(L, M, H)") ----------------------------------------

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


@keras.saving.register_keras_serializable(package="keras_dml")
class BackbonePreprocessing(keras.layers.Layer):
    """A Keras Applications family's `preprocess_input`, as the model's first layer.

    Pixels in [0, 255] go through `keras.applications.<module>.preprocess_input`
    of the family (`keras_dml.backbones.FAMILIES`): BGR mean subtraction for
    ResNet50, [-1, 1] for ResNet50V2 and InceptionV3, unchanged for the families
    that rescale inside (EfficientNetV2, ConvNeXt, MobileNetV3). The layer saves
    only the family's name, so a `.keras` file or SavedModel reproduces it
    exactly; it computes in float32 also under a mixed precision policy.

    Args:
        family: a `keras_dml.backbones.FAMILIES` name, e.g. "ResNet50".
    """

    def __init__(self, family, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if family not in FAMILIES:
            raise ValueError(f"Unknown backbone family {family!r}: expected one of "
                             f"{list(FAMILIES)}.")
        self.family = family
        self.preprocess = getattr(keras.applications, FAMILIES[family].module).preprocess_input

    def call(self, inputs):
        return self.preprocess(keras.ops.cast(inputs, "float32"))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "family": self.family}
