"""Embed a dataset with a model, batch by batch, and evaluate retrieval on it."""

import sys

import numpy as np
import tensorflow as tf

from keras_dml import hyperparameters
from keras_dml.data.bad_images import clear_error
from keras_dml.data.options import steady
from keras_dml.evaluation.retrieval import METRICS, retrieval_metrics


def as_dataset(data, batch_size, steps=None, name="data"):
    """A tf.data of (x, y[, w]) batches that ends, from a dataset or an (x, y) tuple of
    arrays to batch (see `finite_dataset` for `steps` and the checks)."""
    if isinstance(data, tf.data.Dataset):
        return finite_dataset(data, steps, name)
    if isinstance(data, (tuple, list)) and len(data) in (2, 3):
        x, y = data[0], data[1]
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}.")
        return steady(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size))
    raise ValueError(
        "data must be a tf.data.Dataset of (x, y) batches or an (x, y) tuple of arrays, "
        f"got {type(data).__name__}."
    )


def finite_dataset(dataset, steps=None, name="data"):
    """`dataset` checked to end, or its first `steps` batches: what every evaluation
    entry point embeds.

    A training stream such as `keras_dml.data.class_balanced_batches` never ends
    (infinite or unknown cardinality), so embedding it would run until memory is
    exhausted; such a dataset is refused at once unless `steps` bounds it.

    Args:
        dataset: A `tf.data.Dataset` of batches.
        steps: Batches to take from it. Defaults to None: all, which must be a known,
            finite number.
        name: The argument's name in error messages. Defaults to "data".

    Returns:
        `dataset`, or `dataset.take(steps)`.

    Raises:
        ValueError: `dataset` is infinite or of unknown length and `steps` is None.
    """
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
    raise ValueError(
        f"{name} is {kind} (as a training stream such as keras_dml.data."
        f"class_balanced_batches is): embedding it {ending}. Pass keras_dml.data."
        "evaluation_batches(split, preprocessing) (every image once, in order) or (x, y) "
        f"arrays, or bound it with steps=N batches (or dataset.take(N)).{extra}")


def embed_dataset(model, data, batch_size=256, steps=None):
    """Run `model` over `data` in inference mode; return `(embeddings, labels)`.

    Args:
        model: a Keras model (or any callable `model(x, training=False)`) that
            maps a batch to (batch, dim) embeddings.
        data: a `tf.data.Dataset` yielding `(x, y)` or `(x, y, sample_weight)`
            batches, or an `(x, y)` tuple of arrays.
        batch_size: batch size used when `data` is a tuple of arrays. Defaults
            to 256.
        steps: batches taken from a dataset. Defaults to None: all of it (an
            infinite or unknown-length dataset is refused, see `finite_dataset`).

    Returns:
        float32 NumPy embeddings (N, dim) and NumPy labels (N,).
    """
    return embed_with(inference_function(model), data, batch_size, steps=steps)


def inference_function(model):
    """`model(x, training=False)` as a `tf.function`; build it once, embed many times."""
    return tf.function(lambda x: model(x, training=False), reduce_retracing=True)


def embed_with(forward, data, batch_size=256, progress=False, steps=None):
    """Like `embed_dataset`, with a ready `forward(x)` from `inference_function`.

    `progress=True` shows a Keras progress bar over the batches on a terminal.
    """
    embeddings, labels = [], []
    data = as_dataset(data, batch_size, steps)
    bar = None
    if progress and sys.stdout.isatty():
        import keras

        count = int(data.cardinality())
        bar = keras.utils.Progbar(count if count > 0 else None, unit_name="batch")
    try:
        for batch in data:
            _embed_batch(forward, batch, embeddings, labels)
            if bar is not None:
                bar.add(1)
    except tf.errors.OpError as error:  # a bad image file: its own error, naming it
        raise clear_error(error) or error from None
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
    if out.shape.rank != 2:
        raise ValueError(
            f"The model must return (batch, dim) embeddings, got shape {tuple(out.shape)}."
        )
    embeddings.append(np.asarray(out, dtype=np.float32))
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
        dataset: queries, a `tf.data.Dataset` of `(x, y)` batches or an `(x, y)`
            tuple of arrays.
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
    dataset = as_dataset(dataset, batch_size, steps, "dataset")
    if reference_dataset is not None:
        reference_dataset = as_dataset(reference_dataset, batch_size, steps, "reference_dataset")
    queries, query_labels = embed_dataset(model, dataset, batch_size)
    references = reference_labels = None
    if reference_dataset is not None:
        references, reference_labels = embed_dataset(model, reference_dataset, batch_size)
    return retrieval_metrics(
        queries, query_labels, references, reference_labels, ks, metrics, metric, chunk_size
    )
