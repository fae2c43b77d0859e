"""Builds the batch reader of the tf.data pipelines from normalised data: (labels, fetch).

The user's value was normalised once by `keras_dml.data.inputs.as_data` at the
public function's entry; `make_source` takes only that `Data`. A source is
reduced to integer labels (for the index sampler) and a graph-safe
`fetch(indices, seed) -> (x, ok)` that builds one batch. Image bytes are never
held per class; file sources keep only their paths.
"""

import dataclasses

import numpy as np

from keras_dml import backend
from keras_dml.data.inputs import DATASET, SAMPLES, Data, unsupported
from keras_dml.data.labels import label_ids
from keras_dml.data.preprocessing import Preprocessing, decode_image

__all__ = ["Source", "make_source"]

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


def make_source(data, preprocessing=None, training=True):
    """Builds the `Source` of normalised data (`keras_dml.data.inputs.as_data`).

    Labels are integers (any ids) or class names (strings), which become ids
    `0..C-1` in sorted order (`np.unique`), the names kept in `class_names`.

    Args:
        data: A `keras_dml.data.inputs.Data` of form `ARRAYS`, `FILES`, `SPLIT`
            or `DATASET` (a `tf.data.Dataset` of `(x, y)` samples, read once).
        preprocessing: `Preprocessing` for decoded / uint8 images. Defaults to
            `None`: `Preprocessing()` for files, no transform for arrays.
        training: Use `preprocessing.train` (else `.eval`). Defaults to True.

    Raises:
        TypeError: `data` is not a `Data` (the public function did not normalise it).
    """
    if not isinstance(data, Data):
        raise TypeError(f"make_source takes the Data of as_data, got {type(data).__name__}.")
    if data.form not in SAMPLES:
        raise unsupported(data, SAMPLES)
    if data.form == DATASET:
        x, y, encoded = _read_dataset(data.x)
        read, describe = tf.identity, lambda i: f"element {i} of the tf.data.Dataset source"
    else:
        x, y, encoded = data.x, data.y, data.files
        read, describe = tf.io.read_file, lambda i: f"image {i} {x[i]!r}"
    labels, names = label_ids(y, len(x))
    if not encoded:
        return _array_source(np.asarray(x), labels, names, preprocessing, training)
    preprocessing = preprocessing or Preprocessing()
    return Source(labels=labels, from_files=True, describe=describe, class_names=names,
                  paths=x if data.files else None, preprocessing=preprocessing,
                  fetch=_encoded_fetch(tf.constant(x, tf.string), read, preprocessing,
                                       training))


def _transform(preprocessing, training):
    if preprocessing is None:
        return None
    if training:
        return lambda images, seed: preprocessing.train(images, seed=seed)
    return lambda images, seed: preprocessing.eval(images)


def _array_source(x, labels, names, preprocessing, training):
    images = tf.constant(x)
    transform = _transform(preprocessing, training)

    def fetch(indices, seed):
        batch = tf.gather(images, indices)
        ok = tf.ones(tf.shape(indices), tf.bool)
        return (batch if transform is None else transform(batch, seed)), ok

    return Source(labels=labels, fetch=fetch, from_files=False, class_names=names,
                  preprocessing=preprocessing)


def decode_or_flag(table, read, channels):
    """`load(index) -> (uint8 image, ok)`: a read or decode failure gives a
    blank 1 x 1 image and `ok=False` instead of an error, so one bad file can
    neither end the dataset nor be skipped silently.

    TensorFlow ops only: the attempt is a one-element `tf.data.Dataset` whose
    error is dropped (`ignore_errors`), followed by the blank image. No
    `py_function`: one that runs in a `tf.data` worker thread needs the GIL,
    which the main thread holds while it deletes the iterator (after an error,
    or in garbage collection at interpreter shutdown) and waits for that worker:
    a deadlock that would hang the process after a bad image.
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


def _encoded_fetch(table, read, preprocessing, training):
    """The `fetch` of encoded images: `read(table[i])` decoded, then transformed."""
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

    return fetch


def _read_dataset(dataset):
    """`(x, y, encoded)` of a `tf.data.Dataset` of `(x, y)` samples, read in one pass:
    encoded-image strings stay encoded (`encoded` True), fixed-shape images are stacked."""
    spec = dataset.element_spec
    if not (isinstance(spec, tuple) and len(spec) == 2):
        raise ValueError(
            f"A tf.data.Dataset source must yield (x, y) pairs; got element_spec {spec}."
        )
    xs, ys = [], []
    for x, y in dataset.as_numpy_iterator():
        xs.append(x)
        ys.append(y)
    y = np.asarray(ys).reshape(-1)
    if spec[0].dtype == tf.string:
        return xs, y, True
    if not xs:
        raise ValueError("The tf.data.Dataset source is empty.")
    shapes = {x.shape for x in xs}
    if len(shapes) > 1:
        raise ValueError(
            f"The tf.data.Dataset source yields images of {len(shapes)} different shapes "
            f"(e.g. {sorted(shapes)[:2]}); pass encoded images instead (tfds: "
            "decoders={'image': tfds.decode.SkipDecoding()}) or resize them first."
        )
    return np.stack(xs), y, False
