"""`BackbonePreprocessing`: a Keras Applications family's preprocessing inside the model."""

import keras

from keras_dml.backbone_families import FAMILIES

__all__ = ["BackbonePreprocessing"]


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
