"""Turns the accepted inputs of `class_balanced_batches` into (labels, fetch).

A source is reduced to integer labels (for the index sampler) and a
graph-safe `fetch(indices, seed) -> (x, ok)` that builds one batch. Image
bytes are never held per class; file sources keep only their paths.
"""

import dataclasses

import numpy as np

from keras_dml import backend
from keras_dml.data.labels import is_paths, label_ids
from keras_dml.data.preprocessing import Preprocessing, decode_image
from keras_dml.datasets.base import LabeledImages

tf = backend.require_tensorflow("keras_dml.data's tf.data sources")


@dataclasses.dataclass
class Source:
    """Labels plus a batch builder.

    Attributes:
        labels: int array `(N,)`.
        fetch: `fetch(indices, seed) -> (x, ok)` in TF ops; `ok[i]` is False
            when image `indices[i]` could not be read or decoded (its `x` is
            then a blank image).
        from_files: True when decoding can fail at run time.
        describe: `describe(index) -> str` names a sample in error messages
            (its path for files).
        class_names: For class names given as labels (strings): the name of
            each id, `labels == i` being class `class_names[i]` (sorted, as
            `np.unique`). `None` for integer labels.
        paths: The image file paths of a file source, else `None`.
        preprocessing: The `Preprocessing` `fetch` applies, or None.
    """

    labels: np.ndarray
    fetch: object
    from_files: bool
    describe: object = repr
    class_names: list | None = None
    paths: list | None = None
    preprocessing: object = None


def make_source(source, preprocessing=None, training=True):
    """Builds a `Source` from arrays, a `LabeledImages`, paths or a dataset.

    Labels are integers (any ids) or class names (strings), which become ids
    `0..C-1` in sorted order (`np.unique`), the names kept in `class_names`.

    Args:
        source: `(x, y)` arrays; `(paths, y)` with `paths` a list of file
            names; a `LabeledImages`; or a `tf.data.Dataset` of `(x, y)`.
        preprocessing: `Preprocessing` for decoded / uint8 images. Defaults to
            `None`: `Preprocessing()` for files, no transform for arrays.
        training: Use `preprocessing.train` (else `.eval`). Defaults to True.
    """
    if isinstance(source, LabeledImages):
        if source.images is not None:
            return _array_source(source.images, source.labels, preprocessing, training)
        return _file_source(source.paths, source.labels, preprocessing, training)
    if isinstance(source, tf.data.Dataset):
        return _dataset_source(source, preprocessing, training)
    if isinstance(source, (tuple, list)) and len(source) == 2:
        x, y = source
        if is_paths(x):
            return _file_source(list(x), y, preprocessing, training)
        return _array_source(x, y, preprocessing, training)
    raise ValueError(
        "source must be (x, y) arrays, (paths, labels), a LabeledImages or a "
        f"tf.data.Dataset of (x, y); got {type(source).__name__}."
    )


def _transform(preprocessing, training):
    if preprocessing is None:
        return None
    if training:
        return lambda images, seed: preprocessing.train(images, seed=seed)
    return lambda images, seed: preprocessing.eval(images)


def _array_source(x, y, preprocessing, training):
    x = np.asarray(x)
    y, names = label_ids(y, len(x))
    images = tf.constant(x)
    transform = _transform(preprocessing, training)

    def fetch(indices, seed):
        batch = tf.gather(images, indices)
        ok = tf.ones(tf.shape(indices), tf.bool)
        return (batch if transform is None else transform(batch, seed)), ok

    return Source(labels=y, fetch=fetch, from_files=False, class_names=names,
                  preprocessing=preprocessing)


def _file_source(paths, y, preprocessing, training):
    y, names = label_ids(y, len(paths))
    paths = [str(p) for p in paths]
    result = _encoded_source(tf.constant(paths), y, preprocessing, training,
                             tf.io.read_file, lambda i: f"image {i} {paths[i]!r}")
    result.paths, result.class_names = paths, names
    return result


def decode_or_flag(table, read, channels):
    """`load(index) -> (uint8 image, ok)`: a read or decode failure gives a
    blank 1 x 1 image and `ok=False` instead of an error, so one bad file can
    neither end the dataset nor be skipped silently.

    TensorFlow ops only: the attempt is a one-element `tf.data.Dataset` whose
    error is dropped (`ignore_errors`), followed by the blank image. No
    `py_function`: one that runs in a `tf.data` worker thread needs the GIL,
    which the main thread holds while it deletes the iterator (after an error,
    or in garbage collection at interpreter shutdown) and waits for that worker:
    a deadlock, the hang after a bad image (issue 52).
    """
    blank = tf.data.Dataset.from_tensors((tf.zeros([1, 1, channels], tf.uint8), False))

    @tf.autograph.experimental.do_not_convert
    def decoded(encoded):
        return decode_image(encoded, channels=channels), True

    def load(index):
        attempt = tf.data.Dataset.from_tensors(table[index]).map(read).map(decoded)
        image, ok = attempt.ignore_errors().concatenate(blank).take(1).get_single_element()
        image.set_shape([None, None, channels])
        ok.set_shape([])
        return image, ok

    return load


def _encoded_source(table, y, preprocessing, training, read, describe):
    preprocessing = preprocessing or Preprocessing()
    transform = _transform(preprocessing, training)
    spec = (tf.TensorSpec(preprocessing.output_shape, tf.float32), tf.TensorSpec([], tf.bool))
    load = decode_or_flag(table, read, preprocessing.channels)

    def one(index, seed):
        image, ok = load(index)
        return transform(image, seed), ok

    def fetch(indices, seed):
        if seed is None:
            return tf.map_fn(lambda index: one(index, None), indices, fn_output_signature=spec)
        seeds = tf.random.experimental.stateless_split(seed, tf.size(indices))
        return tf.map_fn(lambda args: one(*args), (indices, seeds), fn_output_signature=spec)

    return Source(labels=y, fetch=fetch, from_files=True, describe=describe,
                  preprocessing=preprocessing)


def _dataset_source(dataset, preprocessing, training):
    """One pass over `dataset`; encoded-image strings stay encoded."""
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ValueError(
            f"A tf.data.Dataset source must yield (x, y) pairs; got element_spec {spec}."
        )
    x_spec = spec[0]
    if x_spec.dtype == tf.string:
        items, labels = [], []
        for x, y in dataset.as_numpy_iterator():
            items.append(x)
            labels.append(y)
        labels, names = label_ids(np.asarray(labels).reshape(-1), len(items))
        table = tf.constant(items, dtype=tf.string)
        result = _encoded_source(table, labels, preprocessing, training, tf.identity,
                                 lambda i: f"element {i} of the tf.data.Dataset source")
        result.class_names = names
        return result
    xs, ys = [], []
    for x, y in dataset.as_numpy_iterator():
        xs.append(x)
        ys.append(y)
    if not xs:
        raise ValueError("The tf.data.Dataset source is empty.")
    shapes = {x.shape for x in xs}
    if len(shapes) > 1:
        raise ValueError(
            f"The tf.data.Dataset source yields images of {len(shapes)} different shapes "
            f"(e.g. {sorted(shapes)[:2]}); pass encoded images instead (tfds: "
            "decoders={'image': tfds.decode.SkipDecoding()}) or resize them first."
        )
    return _array_source(np.stack(xs), np.asarray(ys).reshape(-1), preprocessing,
                         training)
