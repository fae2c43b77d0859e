"""Decode every image file of the data once and drop the bad ones."""

import dataclasses
import os
import warnings

import numpy as np

from keras_dml import backend, hyperparameters
from keras_dml.data.inputs import ARRAYS, FILES, PATHS, SPLIT, as_data
from keras_dml.data.preprocessing import decode_image

__all__ = ["unreadable_files", "verify_images"]

tf = backend.require_tensorflow("keras_dml.data.verify_images (TensorFlow's image decoders)")


@hyperparameters.renamed_keywords(source="data")
def verify_images(data, channels=3):
    """Returns `data` without the image files that cannot be read or decoded.

    Every file is read and fully decoded once (in parallel, `AUTOTUNE`); the
    bad ones are dropped with one counted warning naming the first.

    Args:
        data: Data as `keras_dml.data.class_balanced_batches` takes it —
            a `LabeledImages`, `(paths, labels)`, or `(x, y)` arrays — or a
            bare list of image paths. In-memory images have nothing to decode
            and are returned as they are. `source=` is its deprecated name.
        channels: Channels to decode to. Defaults to 3.

    Returns:
        The same kind as `data`: a `LabeledImages` (bad files listed in its
        `skipped` as `(path, "undecodable")`; labels remapped again if a class
        loses all its images, the mapping kept), `(kept paths, their labels)`,
        or the list of kept paths.

    Raises:
        ValueError: For any other form, a `tf.data.Dataset` among them (it has no
            files to check: decode errors there are skipped with
            `dataset.ignore_errors()`).
    """
    given = as_data(data, (SPLIT, FILES, ARRAYS, PATHS), "data", hint=(
        "verify_images checks image files; a tf.data.Dataset drops undecodable elements "
        "with dataset.ignore_errors()."))
    if not given.files:  # images in memory
        return data
    paths = given.x
    good = _decodable(paths, channels)
    bad = np.flatnonzero(~good)
    if not len(bad):
        return data
    warnings.warn(
        f"verify_images: {len(bad)} of {len(paths)} images cannot be decoded and are "
        f"skipped; first: {paths[bad[0]]}",
        stacklevel=2,
    )
    kept = np.flatnonzero(good)
    if given.form == SPLIT:
        skipped = list(data.skipped) + [(data.paths[i], "undecodable") for i in bad]
        return dataclasses.replace(data.subset(kept), skipped=skipped)
    if given.form == PATHS:
        return [data[i] for i in kept]
    x, y = data
    return [x[i] for i in kept], np.asarray(y)[kept]


def unreadable_files(paths, channels=3):
    """Every file of `paths` that cannot be read or decoded, in one pass.

    Args:
        paths: Image file paths.
        channels: Channels to decode to. Defaults to 3.

    Returns:
        `[(path, reason)]` in the order of `paths`, reason "missing" (no such file)
        or "cannot be decoded" (not an image TensorFlow decodes: truncated,
        another format saved under an image extension, ...).

    Examples:

    >>> unreadable_files([])
    []
    """
    paths = [str(p) for p in paths]
    if not paths:
        return []
    good = _decodable(paths, channels)
    return [(paths[i], "cannot be decoded" if os.path.isfile(paths[i]) else "missing")
            for i in np.flatnonzero(~good)]


def _decodable(paths, channels):
    """Boolean mask: which of `paths` read and decode."""
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.range(len(paths), dtype=tf.int64), tf.constant(paths)))

    @tf.autograph.experimental.do_not_convert
    def decode_shape(i, path):
        return i, tf.shape(decode_image(tf.io.read_file(path), channels))

    ds = ds.map(decode_shape, num_parallel_calls=tf.data.AUTOTUNE).ignore_errors()
    good = np.zeros(len(paths), bool)
    for i, _ in ds.as_numpy_iterator():
        good[i] = True
    return good
