"""Backbones trained from scratch (no pretrained weights can be downloaded here)."""

import keras

BACKBONES = ("cnn3", "convnet", "resnet50")


def cnn3(input_shape, width=64, name="cnn3"):
    """Three blocks of 3x3 conv + batch norm + ReLU + 2x2 max-pool, then flatten.

    The few-shot papers' Omniglot network (as in prototypical networks, with three
    blocks): for 28 x 28 inputs the output is a 3 x 3 x `width` map flattened to a
    vector, so the embedding keeps where the strokes are (global average pooling
    of the same map loses it). Returns the feature model (put an `EmbeddingHead`
    on its output).
    """
    inputs = keras.Input(shape=input_shape, name="images")
    x = inputs
    for block in range(3):
        x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False,
                                name=f"block{block}_conv")(x)
        x = keras.layers.BatchNormalization(name=f"block{block}_bn")(x)
        x = keras.layers.ReLU(name=f"block{block}_relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = keras.layers.MaxPooling2D(name=f"block{block}_pool")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    return keras.Model(inputs, x, name=name)


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


def get(name, input_shape):
    """A backbone by name: "cnn3", "convnet" or "resnet50" (keras.applications, weights=None)."""
    if name == "cnn3":
        return cnn3(input_shape)
    if name == "convnet":
        return convnet(input_shape)
    if name == "resnet50":
        return keras.applications.ResNet50(weights=None, include_top=False,
                                           input_shape=input_shape)
    raise ValueError(f"Unknown backbone {name!r}: expected one of {BACKBONES}.")
