"""Turns the accepted inputs of `class_balanced_batches` into (labels, fetch).

A source is reduced to integer labels (for the index sampler) and a
graph-safe `fetch(batch_id, indices) -> x` that builds one batch. Image
bytes are never held per class; file sources keep only their paths.
"""

import dataclasses

import numpy as np
import tensorflow as tf

from keras_dml.data.preprocessing import Preprocessing, decode_image
from keras_dml.datasets.base import LabeledImages


@dataclasses.dataclass
class Source:
    """Labels plus a batch builder.

    Attributes:
        labels: int array `(N,)`.
        fetch: `fetch(batch_id, indices, seed) -> x` in TF ops.
        from_files: True when decoding can fail at run time.
    """

    labels: np.ndarray
    fetch: object
    from_files: bool


def make_source(source, preprocessing=None, training=True):
    """Builds a `Source` from arrays, a `LabeledImages`, paths or a dataset.

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
        if _is_paths(x):
            return _file_source(list(x), y, preprocessing, training)
        return _array_source(x, y, preprocessing, training)
    raise ValueError(
        "source must be (x, y) arrays, (paths, labels), a LabeledImages or a "
        f"tf.data.Dataset of (x, y); got {type(source).__name__}."
    )


def _is_paths(x):
    if isinstance(x, np.ndarray):
        return x.dtype.kind in "US" or (x.dtype == object and len(x) and isinstance(
            x.flat[0], (str, bytes)))
    return isinstance(x, (list, tuple)) and len(x) > 0 and isinstance(x[0], (str, bytes))


def _labels(y, n):
    y = np.asarray(y)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ValueError(
            f"labels must be a 1-D integer array; got shape {y.shape}, dtype {y.dtype}."
        )
    if len(y) != n:
        raise ValueError(f"{n} inputs but {len(y)} labels; they must match.")
    return y


def _transform(preprocessing, training):
    if preprocessing is None:
        return None
    if training:
        return lambda images, seed: preprocessing.train(images, seed=seed)
    return lambda images, seed: preprocessing.eval(images)


def _array_source(x, y, preprocessing, training):
    x = np.asarray(x)
    y = _labels(y, len(x))
    images = tf.constant(x)
    transform = _transform(preprocessing, training)

    def fetch(indices, seed):
        batch = tf.gather(images, indices)
        return batch if transform is None else transform(batch, seed)

    return Source(labels=y, fetch=fetch, from_files=False)


def _file_source(paths, y, preprocessing, training):
    y = _labels(y, len(paths))
    table = tf.constant([str(p) for p in paths])
    return _encoded_source(table, y, preprocessing, training, tf.io.read_file)


def _encoded_source(table, y, preprocessing, training, read):
    preprocessing = preprocessing or Preprocessing()
    transform = _transform(preprocessing, training)
    spec = tf.TensorSpec(preprocessing.output_shape, tf.float32)

    def load(item):
        return decode_image(read(item), channels=preprocessing.channels)

    def fetch(indices, seed):
        items = tf.gather(table, indices)
        if seed is None:
            return tf.map_fn(lambda item: transform(load(item), None), items,
                             fn_output_signature=spec)
        seeds = tf.random.experimental.stateless_split(seed, tf.size(indices))
        return tf.map_fn(lambda args: transform(load(args[0]), args[1]),
                         (items, seeds), fn_output_signature=spec)

    return Source(labels=y, fetch=fetch, from_files=True)


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
        labels = _labels(np.asarray(labels).reshape(-1), len(items))
        table = tf.constant(items, dtype=tf.string)
        return _encoded_source(table, labels, preprocessing, training, tf.identity)
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
