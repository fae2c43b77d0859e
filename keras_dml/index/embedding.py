"""Embedding a dataset for an index, with a progress bar."""

import keras
import numpy as np
import tensorflow as tf

from keras_dml.data.options import steady
from keras_dml.evaluation.embedding import finite_dataset, inference_function


def embed_batches(embedder, dataset, batch_size=256, verbose=1, steps=None):
    """`(embeddings, labels or None)` of `dataset` embedded by `embedder` in inference mode.

    Args:
        embedder: A Keras model (or callable) mapping a batch to `(batch, d)`.
        dataset: A `tf.data.Dataset` of `(x, y)` or `x` batches, or an `(x, y)`
            tuple of arrays, or an array of x.
        batch_size: Batch size for arrays. Defaults to 256.
        verbose: 1 shows a `keras.utils.Progbar` over batches. Defaults to 1.
        steps: Batches taken from a dataset. Defaults to None: all of it (an
            infinite or unknown-length dataset is refused, see `finite_dataset`).
    """
    if isinstance(dataset, tf.data.Dataset):
        dataset = finite_dataset(dataset, steps, "dataset")
    else:
        if isinstance(dataset, (tuple, list)) and len(dataset) == 2:
            dataset = tf.data.Dataset.from_tensor_slices(tuple(dataset))
        else:
            dataset = tf.data.Dataset.from_tensor_slices(dataset)
        dataset = steady(dataset.batch(batch_size))
    count = int(dataset.cardinality())
    progress = keras.utils.Progbar(count if count >= 0 else None, verbose=verbose,
                                   unit_name="batch")
    forward = inference_function(embedder)
    embeddings, labels = [], []
    for step, batch in enumerate(dataset, 1):
        x, y = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) else (batch, None)
        out = forward(x)
        if out.shape.rank != 2:
            raise ValueError(f"The embedder must return (batch, d) embeddings, got shape "
                             f"{tuple(out.shape)}.")
        embeddings.append(np.asarray(out, dtype=np.float32))
        if y is not None:
            labels.append(np.asarray(y).reshape(len(out), -1)[:, 0])
        progress.update(step)
    if not embeddings:
        raise ValueError("dataset is empty: no batch to embed.")
    return np.concatenate(embeddings), np.concatenate(labels) if labels else None
