"""`evaluation_batches`: a split in order, as (x, y) batches for embedding and RecallAtK."""

import numpy as np

from keras_dml import backend
from keras_dml.data.bad_images import BadImageGuard, drop_bad, only_x_y
from keras_dml.data.options import steady
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import make_source
from keras_dml.data.stream import Stream
from keras_dml.hyperparameters import integer_at_least, renamed_keywords

__all__ = ["evaluation_batches", "evaluation_stream"]

tf = backend.require_tensorflow("keras_dml.data.evaluation_batches (tf.data)")


@renamed_keywords(split="data")
def evaluation_batches(data, preprocessing=None, batch_size=256, transform=None,
                       skip_bad_images=False):
    """Every image of `data`, in order, with evaluation preprocessing.

    Args:
        data: Any data `keras_dml.data.class_balanced_batches` takes: a
            `LabeledImages` (e.g. `keras_dml.datasets.load(...).test`), `(x, y)`
            arrays, `(paths, labels)`, or a `tf.data.Dataset` of `(x, y)`.
            Labels may be class names (strings): they become ids in sorted
            order, as `np.unique(labels, return_inverse=True)`. `split=` is
            its deprecated name.
        preprocessing: a `keras_dml.data.Preprocessing`; its evaluation transform
            (resize, centre crop, normalise) is applied to decoded files and to
            in-memory images. Required for image files (the one used for
            training). Defaults to `None`: in-memory images as they are.
        batch_size: images per batch. Defaults to 256.
        transform: optional `(x, y) -> (x, y)` applied per batch (e.g. resizing
            in-memory images).
        skip_bad_images: Leave out image files that cannot be read or decoded
            (each named once on stderr; `keras_dml.data.bad_images.skipped_files`
            lists them) instead of stopping with an error naming the first.
            Defaults to False.

    Returns:
        A finite `keras_dml.data.Stream` (a `tf.data.Dataset`) of `(images,
        labels)` batches (its length known), carrying `preprocessing`: what
        `keras_dml.callbacks.RecallAtK` and `keras_dml.evaluation.embed_dataset` take.
        An image file that cannot be read or decoded stops iteration with an error
        naming it (unless `skip_bad_images`).
    """
    return evaluation_stream(as_data(data, SAMPLES, "data"), preprocessing, batch_size,
                             transform, skip_bad_images)


def evaluation_stream(data, preprocessing=None, batch_size=256, transform=None,
                      skip_bad_images=False):
    """`evaluation_batches` of data already normalised: a `keras_dml.data.inputs.Data`
    of form `SAMPLES` (what the embedding functions hand on after their one `as_data`)."""
    batch_size = integer_at_least("batch_size", batch_size, 1, strict=True)
    data = make_source(data, preprocessing, training=False)
    if data.from_files and preprocessing is None:
        raise ValueError(
            "This split holds image files: pass preprocessing=keras_dml.data.Preprocessing(...) "
            "(the one used for training) so they can be decoded and resized."
        )
    labels = tf.constant(np.asarray(data.labels, np.int32))

    @tf.autograph.experimental.do_not_convert
    def load(indices):
        x, ok = data.fetch(indices, None)
        y = tf.gather(labels, indices)
        x, y = transform(x, y) if transform else (x, y)
        if skip:  # the batch stays, without its bad files
            return (indices[0], indices, ok, tf.constant(True)) + drop_bad(ok, x, y)
        return indices[0], indices, ok, x, y

    skip = skip_bad_images and data.from_files
    batches = tf.data.Dataset.range(len(data.labels)).batch(batch_size).map(
        load, num_parallel_calls=tf.data.AUTOTUNE)
    guard = None
    if data.from_files:  # a bad file is an error naming it, when its batch is taken
        guard = BadImageGuard(data.describe, skip=skip, paths=data.paths)
        stream = guard.stream(batches, every_batch=True)
    else:
        stream = batches.map(only_x_y).prefetch(tf.data.AUTOTUNE)
    return Stream(steady(stream), preprocessing=preprocessing, guard=guard)
