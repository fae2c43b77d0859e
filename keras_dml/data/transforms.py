"""`array_transform`: the batch transform of in-memory images (training and evaluation)."""

import keras
import numpy as np

from keras_dml import backend

__all__ = ["array_transform"]


def array_transform(split, input_shape, pixel_max=1.0):
    """Batch transform for in-memory images: float32 in [0, pixel_max], resized to
    `input_shape`.

    uint8 images (Omniglot) are scaled by pixel_max/255; float images (taken to be
    in [0, 1]) by pixel_max. The same function serves training batches and
    evaluation, so both see one scale. A Keras Applications backbone wants
    `pixel_max=255`.

    Args:
        split: The `LabeledImages` (or any object with `images`) whose dtype sets the scale.
        input_shape: The model input `(H, W[, C])`.
        pixel_max: The largest value of the transformed images. Defaults to 1.0.

    Returns:
        `transform(x, y) -> (x, y)`: TensorFlow ops on the TensorFlow backend, else
        NumPy (`ClassBalancedPyDataset`).
    """
    uint8 = np.asarray(split.images).dtype == np.uint8
    scale = pixel_max / 255.0 if uint8 else pixel_max
    size = tuple(input_shape[:2])
    if not backend.is_tensorflow():
        return _numpy_array_transform(scale, size)
    tf = backend.require_tensorflow("array_transform")

    def transform(x, y):
        x = tf.cast(x, tf.float32) * scale
        if x.shape.rank == 3:
            x = x[..., tf.newaxis]
        if tuple(x.shape[1:3]) != size:
            x = tf.image.resize(x, size, antialias=True)
        return x, y

    return transform


def _numpy_array_transform(scale, size):
    """`array_transform` on NumPy batches (`ClassBalancedPyDataset`, off TensorFlow)."""

    def transform(x, y):
        x = np.asarray(x, np.float32) * np.float32(scale)
        if x.ndim == 3:
            x = x[..., np.newaxis]
        if tuple(x.shape[1:3]) != size:
            x = keras.ops.convert_to_numpy(keras.ops.image.resize(x, size, antialias=True))
        return x, y

    return transform
