"""Builds the batch reader of the tf.data pipelines from normalised data: (labels, fetch).

The user's value was normalised once by `keras_dml.data.inputs.as_data` at the
public function's entry; `make_source` takes only that `Data`. A source is
reduced to integer labels (for the index sampler) and a graph-safe
`fetch(indices, seed) -> (x, ok)` that builds one batch. Image bytes are never
held per class; file sources keep their paths and, for training within
`decoded_cache_mb`, each image's resized copy once it has been read.
"""

import dataclasses

import numpy as np

from keras_dml import backend
from keras_dml.data.inputs import DATASET, SAMPLES, Data, unsupported
from keras_dml.data.labels import label_ids
from keras_dml.data.preprocessing import Preprocessing, decode_image
from keras_dml.hyperparameters import integer_at_least

__all__ = ["Source", "make_source"]

tf = backend.require_tensorflow("keras_dml.data's tf.data sources")

# Memory (MiB) a training source of image files may hold its decoded, resized images in
# (`make_source`); `keras_dml.training.config.TrainConfig.decoded_cache_mb` repeats it
# (that module imports without TensorFlow; a test keeps the two equal).
DECODED_CACHE_MB = 1024


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
        holds_decoded: True when `fetch` keeps each file's decoded, resized image
            after its first read (`make_source`'s `decoded_cache_mb`).
    """

    labels: np.ndarray
    fetch: object
    from_files: bool
    describe: object = repr
    class_names: list | None = None
    paths: list | None = None
    preprocessing: object = None
    holds_decoded: bool = False


def make_source(data, preprocessing=None, training=True, decoded_cache_mb=DECODED_CACHE_MB):
    """Builds the `Source` of normalised data (`keras_dml.data.inputs.as_data`).

    Labels are integers (any ids) or class names (strings), which become ids
    `0..C-1` in sorted order (`np.unique`), the names kept in `class_names`.

    Args:
        data: A `keras_dml.data.inputs.Data` of form `ARRAYS`, `FILES`, `SPLIT`
            or `DATASET` (a `tf.data.Dataset` of `(x, y)` samples, read once).
        preprocessing: `Preprocessing` for decoded / uint8 images. Defaults to
            `None`: `Preprocessing()` for files, no transform for arrays.
        training: Use `preprocessing.train` (else `.eval`). Defaults to True.
        decoded_cache_mb: Training on image files with `crop="random"`: when every
            image's resized float32 copy (`resize_size**2 * channels * 4` bytes) fits in
            this many MiB together, each file is read, decoded and resized once, on its
            first draw, and later draws only crop, flip and normalise the copy held in
            memory (same values as decoding again). 0 decodes on every draw. Defaults
            to `DECODED_CACHE_MB` (1024).

    Raises:
        TypeError: `data` is not a `Data` (the public function did not normalise it).
        ValueError: `decoded_cache_mb` is not a non-negative integer.
    """
    integer_at_least("decoded_cache_mb", decoded_cache_mb, 0)
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
    holds = (training and preprocessing.crop == "random"
             and len(x) * resized_bytes(preprocessing) <= decoded_cache_mb * 2**20)
    return Source(labels=labels, from_files=True, describe=describe, class_names=names,
                  paths=x if data.files else None, preprocessing=preprocessing,
                  holds_decoded=holds,
                  fetch=_encoded_fetch(tf.constant(x, tf.string), read, preprocessing,
                                       training, holds))


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


def _encoded_fetch(table, read, preprocessing, training, holds_decoded):
    """The `fetch` of encoded images: `read(table[i])` decoded, then transformed (the
    resized image held after its first read when `holds_decoded`)."""
    spec = (tf.TensorSpec(preprocessing.output_shape, tf.float32), tf.TensorSpec([], tf.bool))
    load = decode_or_flag(table, read, preprocessing.channels)
    if holds_decoded:
        return _held_fetch(load, preprocessing, spec)
    transform = _transform(preprocessing, training)

    def one(index, seed):
        image, ok = load(index)
        return transform(image, seed), ok

    def fetch(indices, seed):
        return _per_image(one, indices, seed, spec)

    return fetch


def _per_image(function, elements, seed, spec):
    """`function(element, seed)` over the batch `elements`, each with its own stateless
    seed split from `seed` (None for all when `seed` is None)."""
    if seed is None:
        return tf.map_fn(lambda element: function(element, None), elements,
                         fn_output_signature=spec)
    seeds = tf.random.experimental.stateless_split(seed, tf.shape(elements)[0])
    return tf.map_fn(lambda args: function(*args), (elements, seeds), fn_output_signature=spec)


def resized_bytes(preprocessing):
    """The bytes of one resized float32 image of `preprocessing`."""
    side = preprocessing.resize_size
    return side * side * preprocessing.channels * 4


def _held_fetch(load, preprocessing, spec):
    """A training `fetch` that decodes and resizes each image once: its float32 resized
    image is kept in a table the first time it is read, and later draws only crop, flip
    and normalise it. Equal to the uncached fetch, value for value; a file that cannot
    be read is never kept, so it is flagged on every draw as before."""
    shape = [preprocessing.resize_size, preprocessing.resize_size, preprocessing.channels]
    # Lookup tables, not variables: a tf.distribute strategy's scope would mirror a variable.
    with tf.init_scope():
        images = tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.float32, default_value=tf.zeros([np.prod(shape)], tf.float32),
            name="decoded_images")  # values are vectors: images are held flattened
        held = tf.lookup.experimental.MutableHashTable(tf.int64, tf.int32, default_value=0,
                                                       name="decoded_held")  # 1: held
    resized_spec = (tf.TensorSpec(shape, tf.float32), tf.TensorSpec([], tf.bool))

    def decode(index):  # an unreadable file's blank image resizes to zeros
        image, ok = load(index)
        return preprocessing.resized(image), ok

    def one(args):
        index, was_held, image = args
        return tf.cond(was_held, lambda: (image, tf.constant(True)), lambda: decode(index))

    def fetch(indices, seed):
        was_held = held.lookup(indices) > 0
        known = tf.reshape(images.lookup(indices), [-1] + shape)
        resized, ok = tf.map_fn(one, (indices, was_held, known),
                                fn_output_signature=resized_spec)
        new = tf.where(ok & ~was_held)[:, 0]
        keys = tf.gather(indices, new)
        keep = tf.group(images.insert(keys, tf.reshape(tf.gather(resized, new),
                                                       [-1, np.prod(shape)])),
                        held.insert(keys, tf.ones(tf.shape(keys), tf.int32)))
        with tf.control_dependencies([keep]):
            x = _per_image(preprocessing.train_from_resized, resized, seed, spec[0])
        return x, ok

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
