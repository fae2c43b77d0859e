"""Embed data with a model, batch by batch, and evaluate retrieval on it.

The data is a `tf.data.Dataset` (where TensorFlow is installed), a
`keras.utils.PyDataset`, a Python iterable of `(x, y[, w])` batches, or an `(x, y)`
tuple of arrays; every backend embeds each of them. Each public function normalises
it once (`keras_dml.data.inputs.as_data`); the functions below take the finite
batches made from that (`finite_batches`, `model_batches`), not the user's value.
"""

import itertools
import math
import sys

import keras
import numpy as np

from keras_dml import backend, hyperparameters
from keras_dml.backend.trainer import is_tf_dataset, steps as backend_steps
from keras_dml.data.image_errors import clear_data_error
from keras_dml.data.inputs import (ARRAYS, BATCH_STREAMS, DATASET, EMBEDDABLE, SPLIT, WEIGHTED,
                                   Data, as_data)
from keras_dml.evaluation.retrieval import METRICS, retrieval_metrics


class ArrayBatches:
    """`(x, y)` arrays as their consecutive batches of `batch_size`: a finite,
    re-iterable sequence of NumPy (or tensor) slices."""

    def __init__(self, x, y, batch_size):
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}.")
        self.x, self.y = x, y
        self.batch_size = hyperparameters.integer_at_least("batch_size", batch_size, 1,
                                                           strict=True)

    def __len__(self):
        return math.ceil(len(self.x) / self.batch_size)

    def __iter__(self):
        for start in range(0, len(self.x), self.batch_size):
            stop = start + self.batch_size
            yield self.x[start:stop], self.y[start:stop]


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
    """The finite batches of a `Data` of `BATCH_STREAMS`: a dataset, `PyDataset` or
    iterable of batches (see `finite_dataset` for `steps` and the checks), or `(x, y)`
    arrays cut into batches (a `tf.data.Dataset` on the TensorFlow backend, as its other
    pipelines, else `ArrayBatches`)."""
    if data.form not in (ARRAYS, WEIGHTED):
        return finite_dataset(data.x, steps, name)
    batches = ArrayBatches(data.x, data.y, batch_size)
    if not backend.is_tensorflow():
        return batches
    import tensorflow as tf

    from keras_dml.data.options import steady

    return steady(tf.data.Dataset.from_tensor_slices((batches.x, batches.y)).batch(
        batches.batch_size))


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
    """`dataset` checked to end, or its first `steps` batches: what every evaluation
    entry point embeds.

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
        "evaluation_batches(split, preprocessing) (every image once, in order) or (x, y) "
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


def model_batches(model, data, batch_size=256, steps=None, name="data"):
    """The finite batches of what `model` embeds, `data` normalised (`as_data`, forms
    `EMBEDDABLE`): image files become `keras_dml.data.evaluation_batches` prepared as
    the model records (`keras_dml.data.stream_preprocessing.model_preprocessing`), an
    in-memory `LabeledImages` its `(images, labels)`; a keras_dml stream prepared
    otherwise than the model records gets a warning."""
    from keras_dml.data.stream_preprocessing import (model_preprocessing, stream_preprocessing,
                                                      warn_if_prepared_otherwise)

    data = as_data(data, EMBEDDABLE, name)
    if data.files:
        from keras_dml.data.evaluation_batches import evaluation_batches

        data = Data(DATASET, evaluation_batches(data, model_preprocessing(model), batch_size))
    elif data.form == SPLIT:
        data = Data(ARRAYS, data.x, data.y)
    else:
        warn_if_prepared_otherwise(model, stream_preprocessing(data.x))
    return finite_batches(data, batch_size, steps, name)


def embed_dataset(model, data, batch_size=256, steps=None):
    """Run `model` over `data` in inference mode; return `(embeddings, labels)`.

    Args:
        model: a Keras model (or any callable `model(x, training=False)`) that
            maps a batch to (batch, dim) embeddings.
        data: a `tf.data.Dataset`, a `keras.utils.PyDataset` or an iterable
            yielding `(x, y)` or `(x, y, sample_weight)` batches, an `(x, y)`
            tuple of arrays, or a `keras_dml.datasets.LabeledImages` split or
            `(paths, labels)` of image files, prepared as the model records
            (`model.preprocessing` of a fitted `DMLModel` or its `embedder()`;
            else `keras-dml train`'s for its input, with a warning).
        batch_size: batch size used when `data` is arrays or files. Defaults
            to 256.
        steps: batches taken from a dataset. Defaults to None: all of it (an
            infinite or unknown-length dataset is refused, see `finite_dataset`).

    Returns:
        float32 NumPy embeddings (N, dim) and NumPy labels (N,).
    """
    return embed_finite(inference_function(model),
                         model_batches(model, data, batch_size, steps))


def inference_function(model):
    """`model(x, training=False)` compiled for the running backend (a `tf.function` on
    TensorFlow, jitted on JAX, without gradient on PyTorch); build it once, embed many
    times."""
    return backend_steps().inference_function(model)


def embed_with(forward, data, batch_size=256, progress=False, steps=None):
    """Like `embed_dataset`, with a ready `forward(x)` from `inference_function`.

    `progress=True` shows a Keras progress bar over the batches on a terminal.
    """
    return embed_finite(forward, as_dataset(data, batch_size, steps), progress)


def embed_finite(forward, batches, progress=False):
    """`(embeddings, labels)` of finite batches (`finite_batches`, `model_batches`) by
    `forward(x)`; `progress` as in `embed_with`."""
    embeddings, labels = [], []
    bar = None
    if progress and sys.stdout.isatty():
        count = int(batches.cardinality()) if is_tf_dataset(batches) else len(batches)
        bar = keras.utils.Progbar(count if count > 0 else None, unit_name="batch")
    try:
        for batch in batches:
            _embed_batch(forward, batch, embeddings, labels)
            if bar is not None:
                bar.add(1)
    except Exception as error:  # a bad image file: its own error, naming it
        clear = clear_data_error(error)
        if clear is None:
            raise
        raise clear from None
    if not embeddings:
        raise ValueError("data is empty: no batch to embed.")
    return np.concatenate(embeddings), np.concatenate(labels)


def _embed_batch(forward, batch, embeddings, labels):
    """Appends the embeddings and labels of one `(x, y[, w])` batch."""
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            "Each dataset element must be an (x, y) or (x, y, sample_weight) tuple, "
            f"got {type(batch).__name__}."
        )
    x, y = batch[0], batch[1]
    out = forward(x)
    if len(out.shape) != 2:
        raise ValueError(
            f"The model must return (batch, dim) embeddings, got shape {tuple(out.shape)}."
        )
    embeddings.append(keras.ops.convert_to_numpy(out).astype(np.float32, copy=False))
    y = np.asarray(y)
    labels.append(y.reshape(len(y), -1)[:, 0] if y.ndim == 2 and y.shape[1] == 1 else y)


@hyperparameters.renamed_keywords(distance="metric")
def evaluate_retrieval(
    model,
    dataset,
    reference_dataset=None,
    ks=(1, 2, 4, 8),
    metrics=METRICS,
    metric="cosine",
    chunk_size=None,
    batch_size=256,
    steps=None,
):
    """Embed `dataset` (and `reference_dataset`) with `model`; return `retrieval_metrics`.

    Args:
        model: a Keras model mapping inputs to (batch, dim) embeddings.
        dataset: queries, a `tf.data.Dataset`, `keras.utils.PyDataset` or iterable
            of `(x, y)` batches, an `(x, y)` tuple of arrays, or image files (see
            `embed_dataset`: prepared as the model records).
        reference_dataset: references in the same form. Defaults to None:
            leave-one-out on the queries.
        ks, metrics, metric, chunk_size: see `retrieval_metrics`. (`distance=`
            is the deprecated name of `metric=`.)
        batch_size: batch size for array inputs. Defaults to 256.
        steps: batches taken from each dataset. Defaults to None: all (see
            `finite_dataset`).

    Returns:
        The dict of `retrieval_metrics`.

    Examples:
        >>> model = keras.Sequential([keras.layers.Dense(8)])
        >>> evaluate_retrieval(model, (x_test, y_test), ks=(1, 2))["recall@1"]  # doctest: +SKIP
    """
    # both checked before the first is embedded
    dataset = model_batches(model, dataset, batch_size, steps, "dataset")
    if reference_dataset is not None:
        reference_dataset = model_batches(model, reference_dataset, batch_size, steps,
                                          "reference_dataset")
    forward = inference_function(model)
    queries, query_labels = embed_finite(forward, dataset)
    references = reference_labels = None
    if reference_dataset is not None:
        references, reference_labels = embed_finite(forward, reference_dataset)
    return retrieval_metrics(
        queries, query_labels, references, reference_labels, ks, metrics, metric, chunk_size
    )
