"""Backbones trained from scratch (no pretrained weights can be downloaded here).

`cnn3` and `convnet` normalise with `FusedBatchNormalization`: Keras' layer computed
by TensorFlow's fused kernel (the same function; a training step of the Omniglot
recipe's CNN takes 57 instead of 92 ms on two CPU cores).
"""

import keras

from keras_dml.batch_norm import FusedBatchNormalization
from keras_dml.hyperparameters import integer_at_least

BACKBONES = ("convnet", "cnn3", "resnet50")


def convnet(input_shape, widths=(32, 64, 128), name="convnet"):
    """A small VGG-style network: per width, two 3x3 conv + batch norm + ReLU, then pool.

    Pools only while the feature map is larger than 2x2, so it also fits 8x8 digits.
    Returns the feature-map model (put an `EmbeddingHead` on its output).
    """
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    size = min(input_shape[0], input_shape[1])
    for stage, width in enumerate(widths):
        for conv in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False,
                                    name=f"stage{stage}_conv{conv}")(x)
            x = FusedBatchNormalization(name=f"stage{stage}_bn{conv}")(x)
            x = keras.layers.ReLU(name=f"stage{stage}_relu{conv}")(x)
        if size > 2 and stage < len(widths) - 1:
            x = keras.layers.MaxPooling2D(name=f"stage{stage}_pool")(x)
            size //= 2
    return keras.Model(inputs, x, name=name)


def cnn3(input_shape, filters=64, blocks=3, name="cnn3"):
    """The Omniglot protocol's network: `blocks` x (3x3 conv, batch norm, ReLU, 2x2
    max-pool), flattened (3 x 3 x 64 = 576 features at 28 x 28).

    Returns the feature model (put an `EmbeddingHead` on its output; on a vector it
    is a dense layer and the L2 normalisation).
    """
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    for block in range(blocks):
        x = keras.layers.Conv2D(filters, 3, padding="same", name=f"conv{block}")(x)
        x = FusedBatchNormalization(name=f"bn{block}")(x)
        x = keras.layers.ReLU(name=f"relu{block}")(x)
        x = keras.layers.MaxPooling2D(name=f"pool{block}")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name=name)


def get(name, input_shape, width=None):
    """A backbone by name: "convnet", "cnn3" or "resnet50" (keras.applications,
    weights=None).

    `width` sets the filters of cnn3's convolutions (default 64) or of convnet's
    first stage (default 32, doubled per stage); resnet50 has no width.
    """
    if name == "resnet50":
        if width is not None:
            raise ValueError(f"width={width!r} applies to cnn3 and convnet, not resnet50.")
        return keras.applications.ResNet50(weights=None, include_top=False,
                                           input_shape=input_shape)
    if width is not None:
        integer_at_least("width", width, 1, strict=True)
    if name == "convnet":
        return convnet(input_shape) if width is None else convnet(
            input_shape, widths=(width, 2 * width, 4 * width))
    if name == "cnn3":
        return cnn3(input_shape) if width is None else cnn3(input_shape, filters=width)
    raise ValueError(f"Unknown backbone {name!r}: expected one of {BACKBONES}.")


# Low, mid and high levels of keras.applications.ResNet50: the last block of stages 3-5.
RESNET50_LEVELS = ("conv3_block4_out", "conv4_block6_out", "conv5_block3_out")


def multi_level_embedder(backbone, layer_names, dims=512, pooling="avg", normalize_levels=True,
                         model_class=None, name=None):
    """An embedding model from the named layers of any functional Keras backbone.

    Args:
        backbone: a functional `keras.Model` (e.g. `keras.applications.ResNet50(
            weights=None, include_top=False, input_shape=(224, 224, 3))`).
        layer_names: the layers whose outputs are the levels, low to high, e.g.
            `RESNET50_LEVELS`. `backbone.summary()` lists the names.
        dims: embedding size per level: an int for every level, or one per level.
            Defaults to 512.
        pooling, normalize_levels: as for `keras_dml.layers.MultiLevelEmbedding`.
        model_class: the model to build. Defaults to `keras_dml.models.DMLModel`.
        name: model name. Defaults to None.

    Returns:
        `model_class(backbone.input, embeddings)` with embeddings of size sum(dims).

    Examples:

    >>> backbone = keras.applications.ResNet50(weights=None, include_top=False,
    ...                                        input_shape=(224, 224, 3))
    >>> model = keras_dml.backbones.multi_level_embedder(backbone, RESNET50_LEVELS, 512)
    >>> model.compile("adam", loss=keras_dml.losses.InstanceCrossEntropy())
    """
    if isinstance(layer_names, str) or not len(layer_names):
        raise ValueError(f"layer_names must be a non-empty list of layer names, got "
                         f"{layer_names!r}.")
    if isinstance(dims, (int, float)):
        dims = [int(dims)] * len(layer_names)
    if len(dims) != len(layer_names):
        raise ValueError(f"dims has {len(dims)} entries but layer_names has "
                         f"{len(layer_names)}: give one size per level or a single int.")
    known = {layer.name for layer in getattr(backbone, "layers", [])}
    missing = [n for n in layer_names if n not in known]
    if missing:
        raise ValueError(
            f"Backbone {getattr(backbone, 'name', backbone)!r} has no layer(s) {missing}; "
            f"its layers include {sorted(known)[-8:] if known else 'none'} "
            "(see backbone.summary() for all names)."
        )
    try:
        maps = [backbone.get_layer(n).output for n in layer_names]
    except (AttributeError, ValueError) as error:
        raise ValueError(
            f"Cannot read the outputs of layers {list(layer_names)}: the backbone must be a "
            f"functional keras.Model ({error})."
        ) from None
    from keras_dml.layers import MultiLevelEmbedding

    embeddings = MultiLevelEmbedding(dims, pooling=pooling, normalize_levels=normalize_levels,
                                     name="multi_level_embedding")(maps)
    if model_class is None:
        from keras_dml.models import DMLModel as model_class
    return model_class(backbone.input, embeddings, name=name)
