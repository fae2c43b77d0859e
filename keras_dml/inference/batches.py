"""Finite batches: what the embedding loop iterates, made once from normalised data.

Every function here takes a `keras_dml.data.inputs.Data` (or a stream taken out of
one), never the user's value; `as_dataset` is the one public entry that normalises.
"""

import itertools
import math

import keras

from keras_dml import backend, hyperparameters
from keras_dml.backend.trainer import is_tf_dataset
from keras_dml.data.inputs import ARRAYS, BATCH_STREAMS, IMAGES, WEIGHTED, as_data

__all__ = ["ArrayBatches", "Batches", "as_dataset", "finite_batches", "finite_dataset"]


class ArrayBatches:
    """Arrays as their consecutive batches of `batch_size`: a finite, re-iterable
    sequence of NumPy (or tensor) slices, `(x, y)` or `x` alone when `y` is None."""

    def __init__(self, x, y, batch_size):
        if y is not None and len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}.")
        self.x, self.y = x, y
        self.batch_size = hyperparameters.integer_at_least("batch_size", batch_size, 1,
                                                           strict=True)

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.x), self.batch_size):
            stop = start + self.batch_size
            yield self.x[start:stop] if self.y is None else (self.x[start:stop],
                                                              self.y[start:stop])


class Batches:
    """The first `count` batches of a `keras.utils.PyDataset` or of an iterable of
    batches, re-iterable when the source is."""

    def __init__(self, source, count):
        self.source, self.count = source, count

    def __len__(self):
        return self.count

    def __iter__(self):
        if isinstance(self.source, keras.utils.PyDataset):
            return (self.source[i] for i in range(self.count))
        return itertools.islice(self.source, self.count)


def as_dataset(data, batch_size, steps=None, name="data"):
    """Batches of `(x, y[, w])` that end: `data` normalised (`as_data`, forms
    `BATCH_STREAMS`), then `finite_batches`."""
    return finite_batches(as_data(data, BATCH_STREAMS, name), batch_size, steps, name)


def finite_batches(data, batch_size, steps=None, name="data"):
    """The finite batches of in-memory or streamed normalised data.

    Args:
        data: A `Data` of form `ARRAYS`, `WEIGHTED` or `IMAGES` (cut into batches of
            `batch_size`: a `tf.data.Dataset` on the TensorFlow backend, as its other
            pipelines, else `ArrayBatches`), or a stream (`DATASET`, `PYDATASET`,
            `BATCHES`: see `finite_dataset` for `steps` and the checks).
        batch_size: Items per batch of arrays.
        steps: Batches taken from a stream. Defaults to None: all of it.
        name: The argument's name in error messages. Defaults to "data".
    """
    if data.form not in (ARRAYS, WEIGHTED, IMAGES):
        return finite_dataset(data.x, steps, name)
    batches = ArrayBatches(data.x, None if data.form == IMAGES else data.y, batch_size)
    if not backend.is_tensorflow():
        return batches
    import tensorflow as tf

    from keras_dml.data.options import steady

    parts = batches.x if batches.y is None else (batches.x, batches.y)
    return steady(tf.data.Dataset.from_tensor_slices(parts).batch(batches.batch_size))


def _length(data):
    """Batches in `data`: an int, None when infinite (`PyDataset.num_batches` None), or
    "unknown"."""
    if isinstance(data, keras.utils.PyDataset):
        try:
            return data.num_batches
        except NotImplementedError:
            return "unknown"
    try:
        return len(data)
    except TypeError:
        return "unknown"


def finite_dataset(dataset, steps=None, name="data"):
    """`dataset` checked to end, or its first `steps` batches: what every embedding
    takes from a stream.

    A training stream such as `keras_dml.data.class_balanced_batches` (or
    `keras_dml.data.ClassBalancedPyDataset`) never ends (infinite or unknown length),
    so embedding it would run until memory is exhausted; such a dataset is refused at
    once unless `steps` bounds it.

    Args:
        dataset: A `tf.data.Dataset`, a `keras.utils.PyDataset` or an iterable of
            batches (a list of batches is finite; a generator has unknown length).
        steps: Batches to take from it. Defaults to None: all, which must be a known,
            finite number.
        name: The argument's name in error messages. Defaults to "data".

    Returns:
        `dataset`, or its first `steps` batches (`dataset.take(steps)` for a
        `tf.data.Dataset`, else a `Batches`).

    Raises:
        ValueError: `dataset` is infinite or of unknown length and `steps` is None.
    """
    if is_tf_dataset(dataset):
        return _finite_tf_dataset(dataset, steps, name)
    length = _length(dataset)
    if steps is not None:
        steps = hyperparameters.integer_at_least("steps", steps, 1, strict=True)
        return Batches(dataset, steps if length in (None, "unknown") else min(steps, length))
    if length is None:
        kind, ending, extra = f"an infinite {type(dataset).__name__}", "would never finish", ""
    elif length == "unknown":
        kind, ending, extra = f"a {type(dataset).__name__} of unknown length", \
            "may never finish", " If it is finite, pass a list of its batches."
    else:
        return Batches(dataset, length) if isinstance(dataset, keras.utils.PyDataset) \
            else dataset
    raise _endless(name, kind, ending, extra)


def _endless(name, kind, ending, extra, bound=""):
    return ValueError(
        f"{name} is {kind} (as a training stream such as keras_dml.data."
        f"class_balanced_batches is): embedding it {ending}. Pass keras_dml.data."
        "evaluation_batches(data, preprocessing) (every image once, in order) or (x, y) "
        f"arrays, or bound it with steps=N batches{bound}.{extra}")


def _finite_tf_dataset(dataset, steps, name):
    """`finite_dataset` of a `tf.data.Dataset` (TensorFlow is imported: it made one)."""
    import tensorflow as tf

    if steps is not None:
        return dataset.take(hyperparameters.integer_at_least("steps", steps, 1, strict=True))
    cardinality = int(dataset.cardinality())
    if cardinality == tf.data.INFINITE_CARDINALITY:
        kind, ending, extra = "an infinite tf.data.Dataset", "would never finish", ""
    elif cardinality == tf.data.UNKNOWN_CARDINALITY:
        kind, ending = "a tf.data.Dataset of unknown length", "may never finish"
        extra = (" If it is finite, state its length: dataset.apply(tf.data.experimental."
                 "assert_cardinality(num_batches)).")
    else:
        return dataset
    raise _endless(name, kind, ending, extra, bound=" (or dataset.take(N))")
