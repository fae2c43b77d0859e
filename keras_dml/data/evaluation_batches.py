"""`evaluation_batches`: a split in order, as (x, y) batches for embedding and RecallAtK."""

import numpy as np
import tensorflow as tf

from keras_dml.data.bad_images import BadImageGuard
from keras_dml.data.options import steady
from keras_dml.data.sources import decode_or_flag
from keras_dml.data.stream_preprocessing import record_preprocessing
from keras_dml.hyperparameters import integer_at_least


def evaluation_batches(split, preprocessing=None, batch_size=256, transform=None):
    """Every image of a `keras_dml.datasets` split, in order, with evaluation preprocessing.

    Args:
        split: a `LabeledImages` (e.g. `keras_dml.datasets.load(...).test`), with
            in-memory `images` or image file `paths`.
        preprocessing: a `keras_dml.data.Preprocessing`; its evaluation transform
            (resize, centre crop, normalise) is applied to decoded files. Required
            for file-based splits.
        batch_size: images per batch. Defaults to 256.
        transform: optional `(x, y) -> (x, y)` for in-memory images (e.g. resizing).

    Returns:
        A finite `tf.data.Dataset` of `(images, labels)` batches: what
        `keras_dml.callbacks.RecallAtK` and `keras_dml.evaluation.embed_dataset` take.
    """
    batch_size = integer_at_least("batch_size", batch_size, 1, strict=True)
    labels = np.asarray(split.labels, np.int32)
    if split.images is not None:
        batches = tf.data.Dataset.from_tensor_slices((split.images, labels)).batch(batch_size)
        return steady(batches.map(transform) if transform else batches)
    if preprocessing is None:
        raise ValueError(
            "This split holds image files: pass preprocessing=keras_dml.data.Preprocessing(...) "
            "(the one used for training) so they can be decoded and resized."
        )

    paths = [str(p) for p in split.paths]
    decode = decode_or_flag(tf.constant(paths), tf.io.read_file, preprocessing.channels)
    guard = BadImageGuard(lambda i: f"image {i} {paths[i]!r}")

    @tf.autograph.experimental.do_not_convert
    def load(index, label):
        image, ok = decode(index)
        return index, ok, preprocessing.eval(image), label

    @tf.autograph.experimental.do_not_convert
    def with_batch_id(indices, ok, x, y):  # a bad file is an error naming it
        return indices[0], indices, ok, x, y

    items = tf.data.Dataset.from_tensor_slices((np.arange(len(paths)), labels))
    return record_preprocessing(steady(guard.stream(
        items.map(load, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
        .map(with_batch_id))), preprocessing)
