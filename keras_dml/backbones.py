"""Backbones trained from scratch (no pretrained weights can be downloaded here)."""

import keras

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
            x = keras.layers.BatchNormalization(name=f"stage{stage}_bn{conv}")(x)
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
        x = keras.layers.BatchNormalization(name=f"bn{block}")(x)
        x = keras.layers.ReLU(name=f"relu{block}")(x)
        x = keras.layers.MaxPooling2D(name=f"pool{block}")(x)
    return keras.Model(inputs, keras.layers.Flatten(name="flatten")(x), name=name)


def get(name, input_shape):
    """A backbone by name: "convnet", "cnn3" or "resnet50" (keras.applications,
    weights=None)."""
    if name == "convnet":
        return convnet(input_shape)
    if name == "cnn3":
        return cnn3(input_shape)
    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, include_top=False,
                                           input_shape=input_shape)
    raise ValueError(f"Unknown backbone {name!r}: expected one of {BACKBONES}.")
