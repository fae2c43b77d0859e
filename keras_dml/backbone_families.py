"""The Keras Applications backbone families and the preprocessing each expects.

The one table that `keras_dml.layers.BackbonePreprocessing` (the preprocessing
inside a model), `keras_dml.backbones` (building the networks) and the input
pipelines read; it imports nothing of keras_dml, so each of them can. Users read
it as `keras_dml.backbones.FAMILIES`.
"""

import dataclasses

__all__ = ["BACKBONE_ALIASES", "FAMILIES", "Family", "HUB_POOLINGS", "HUB_PREFIX",
           "backbone_name", "is_hub", "pretrained_name"]


@dataclasses.dataclass(frozen=True)
class Family:
    """A Keras Applications backbone: how to build it and what it expects.

    Attributes:
        module: the `keras.applications` module holding its `preprocess_input`.
        input_range: what `preprocess_input` makes of pixels in [0, 255].
        default_size: the image side of its ImageNet training.
        min_size: the smallest image side Keras accepts.
    """

    module: str
    input_range: str
    default_size: int
    min_size: int = 32


_CAFFE = "caffe: RGB to BGR, minus the ImageNet mean (no scaling)"
_TF = "tf: scaled to [-1, 1]"
_INSIDE = "none: [0, 255], the network rescales inside"

# Name (the `keras.applications` constructor) -> family. Checked against the
# installed Keras by tests/test_backbones.py.
FAMILIES = {
    "ResNet50": Family("resnet", _CAFFE, 224),
    "ResNet50V2": Family("resnet_v2", _TF, 224),
    "InceptionV3": Family("inception_v3", _TF, 299, min_size=75),
    "EfficientNetV2B0": Family("efficientnet_v2", _INSIDE, 224),
    "EfficientNetV2B1": Family("efficientnet_v2", _INSIDE, 240),
    "EfficientNetV2B2": Family("efficientnet_v2", _INSIDE, 260),
    "EfficientNetV2B3": Family("efficientnet_v2", _INSIDE, 300),
    "EfficientNetV2S": Family("efficientnet_v2", _INSIDE, 384),
    "ConvNeXtTiny": Family("convnext", _INSIDE, 224),
    "MobileNetV3Small": Family("mobilenet_v3", _INSIDE, 224),
    "MobileNetV3Large": Family("mobilenet_v3", _INSIDE, 224),
}

#: The prefix of a KerasHub backbone's name, "hub:PRESET" (`keras_dml.hub_backbones`).
HUB_PREFIX = "hub:"
#: How a KerasHub tower's tokens become one vector: the class token, the mean or GeM of
#: the patch tokens, or the tower's own pooling head (SigLIP's attention pooling).
HUB_POOLINGS = ("cls", "mean", "gem", "head")

#: Other spellings of a backbone's name; any case of a name is accepted too.
BACKBONE_ALIASES = {"resnet50": "ResNet50"}


def is_hub(name):
    """True for a KerasHub backbone name, "hub:PRESET"."""
    return isinstance(name, str) and name.startswith(HUB_PREFIX)


def pretrained_name(name):
    """`name` as a pretrained backbone's name: a "hub:PRESET" as it is, a Keras
    Applications family as `FAMILIES` spells it (any case); None for anything else
    (a run folder, cnn3, convnet)."""
    if is_hub(name):
        return name if len(name) > len(HUB_PREFIX) else None
    if not isinstance(name, str):
        return None
    known = {family.lower(): family for family in FAMILIES}
    known.update(BACKBONE_ALIASES)
    return known.get(name.lower())


def backbone_name(name):
    """`name` as `keras_dml.backbones.BACKBONES` spells it, for any case
    ("mobilenetv3small"), or "resnet50" for ResNet50; a KerasHub "hub:PRESET" as
    it is.

    Raises:
        ValueError: naming `name` and the backbones, when it is none of them.
    """
    if is_hub(name) and len(name) > len(HUB_PREFIX):
        return name
    names = ("cnn3", "convnet") + tuple(FAMILIES)
    known = {n.lower(): n for n in names}
    known.update(BACKBONE_ALIASES)
    if not isinstance(name, str) or name.lower() not in known:
        raise ValueError(f"Unknown backbone {name!r}: expected one of {list(names)} "
                         "(any case) or hub:PRESET (a KerasHub preset).")
    return known[name.lower()]
