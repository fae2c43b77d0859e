"""Decode every image of a file-based split once and drop the bad ones."""

import dataclasses
import warnings

import numpy as np
import tensorflow as tf

from keras_dml.data.preprocessing import decode_image


def verify_images(split, channels=3):
    """Returns `split` without the images that cannot be read or decoded.

    Every file is read and fully decoded once (in parallel, `AUTOTUNE`); the
    bad ones are dropped with one counted warning and listed in the result's
    `skipped` as `(path, "undecodable")`. Labels are remapped again if a
    class loses all its images (the mapping is kept).

    Args:
        split: A file-based `keras_dml.datasets.LabeledImages`.
        channels: Channels to decode to. Defaults to 3.

    Returns:
        A `LabeledImages`.
    """
    if split.paths is None:
        raise ValueError("verify_images needs a file-based LabeledImages (paths).")
    n = len(split.paths)
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.range(n, dtype=tf.int64), tf.constant([str(p) for p in split.paths])))
    @tf.autograph.experimental.do_not_convert
    def decode_shape(i, path):
        return i, tf.shape(decode_image(tf.io.read_file(path), channels))

    ds = ds.map(decode_shape, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    good = np.zeros(n, bool)
    for i, _ in ds.as_numpy_iterator():
        good[i] = True
    bad = np.flatnonzero(~good)
    if not len(bad):
        return split
    warnings.warn(
        f"verify_images: {len(bad)} of {n} images cannot be decoded and are "
        f"skipped; first: {split.paths[bad[0]]}",
        stacklevel=2,
    )
    kept = split.subset(np.flatnonzero(good))
    skipped = list(split.skipped) + [(split.paths[i], "undecodable") for i in bad]
    return dataclasses.replace(kept, skipped=skipped)
