"""Embedding a dataset, a split or image files for an index, with a progress bar."""

import keras
import numpy as np

from keras_dml import backend
from keras_dml.data.options import steady
from keras_dml.evaluation.embedding import finite_dataset, inference_function

tf = backend.require_tensorflow("keras_dml.index.embedding (embedding image files and tf.data)")


def embed_batches(embedder, dataset, batch_size=256, verbose=1, steps=None, progress=None):
    """`(embeddings, labels or None)` of `dataset` embedded by `embedder` in inference mode.

    Args:
        embedder: A Keras model (or callable) mapping a batch to `(batch, d)`.
        dataset: A `tf.data.Dataset` of `(x, y)` or `x` batches, or an `(x, y)`
            tuple of arrays, or an array of x.
        batch_size: Batch size for arrays. Defaults to 256.
        verbose: 1 shows the images embedded, images per second and time left
            (`keras_dml.index.progress.Progress`). Defaults to 1.
        steps: Batches taken from a dataset. Defaults to None: all of it (an
            infinite or unknown-length dataset is refused, see `finite_dataset`).
        progress: A `Progress` (or any object told `update(images)` after each
            batch and `close()` at the end). Defaults to None: a `Progress`
            over the images when their number is known.

    Raises:
        ValueError: An image file cannot be read or decoded (named), the
            embedder does not return `(batch, d)`, the dataset is empty, or it
            is infinite or of unknown length without `steps`.
    """
    from keras_dml.data.bad_images import clear_error

    from keras_dml.index.progress import Progress

    total = None
    if isinstance(dataset, tf.data.Dataset):
        dataset = finite_dataset(dataset, steps, "dataset")
    else:
        if isinstance(dataset, (tuple, list)) and len(dataset) == 2:
            dataset = tf.data.Dataset.from_tensor_slices(tuple(dataset))
        else:
            dataset = tf.data.Dataset.from_tensor_slices(dataset)
        total = int(dataset.cardinality())
        dataset = steady(dataset.batch(batch_size))
    if progress is None:
        progress = Progress(total, enabled=bool(verbose))
    forward = inference_function(embedder)
    embeddings, labels = [], []
    try:
        for batch in dataset:
            x, y = (batch[0], batch[1]) if isinstance(batch, (tuple, list)) else (batch, None)
            out = forward(x)
            if len(out.shape) != 2:
                raise ValueError(f"The embedder must return (batch, d) embeddings, got shape "
                                 f"{tuple(out.shape)}.")
            embeddings.append(keras.ops.convert_to_numpy(out).astype(np.float32, copy=False))
            if y is not None:
                labels.append(np.asarray(y).reshape(len(out), -1)[:, 0])
            progress.update(len(out))
    except tf.errors.OpError as error:  # a bad image file: its one-line message
        clear = clear_error(error)
        if clear is None:
            raise
        raise clear from None
    finally:
        progress.close()
    if not embeddings:
        raise ValueError("dataset is empty: no batch to embed.")
    return np.concatenate(embeddings), np.concatenate(labels) if labels else None


def embed_source(embedder, source, batch_size=256, verbose=1, preprocessing=None):
    """`(embeddings, labels or None, paths or None)` of any image source.

    Args:
        embedder: As in `embed_batches`.
        source: A `keras_dml.datasets.LabeledImages` (labels: its class
            names), `(paths, labels)` image files (labels as given), or what
            `embed_batches` takes.
        batch_size, verbose: As in `embed_batches`.
        preprocessing: The `Preprocessing` of image files. Defaults to None:
            the one the embedder records, else `keras-dml train`'s for its input
            (with a warning; see `keras_dml.data.stream_preprocessing.model_preprocessing`).
    """
    from keras_dml.data import evaluation_batches
    from keras_dml.data.sources import is_paths
    from keras_dml.datasets import LabeledImages

    if isinstance(source, LabeledImages):
        files = source.paths is not None
        batches = evaluation_batches(
            source, _file_preprocessing(embedder, preprocessing) if files else preprocessing,
            batch_size=batch_size)
        embeddings, _ = embed_batches(embedder, batches, verbose=verbose)
        names = np.asarray(source.class_names, str)
        return embeddings, names[source.labels], list(source.paths) if files else None
    if isinstance(source, (tuple, list)) and len(source) == 2 and is_paths(source[0]):
        paths, labels = [str(p) for p in source[0]], np.asarray(source[1])
        batches = evaluation_batches((paths, labels), _file_preprocessing(embedder, preprocessing),
                                     batch_size=batch_size)
        embeddings, _ = embed_batches(embedder, batches, verbose=verbose)
        return embeddings, labels, paths
    embeddings, labels = embed_batches(embedder, source, batch_size, verbose)
    return embeddings, labels, None


def _file_preprocessing(embedder, preprocessing):
    from keras_dml.data.stream_preprocessing import model_preprocessing

    return model_preprocessing(embedder, preprocessing)


def source_preprocessing(embedder, source, preprocessing=None):
    """The `Preprocessing` that makes `source`'s embeddings, to record with them.

    `preprocessing` when given; for image files, the one `embed_source` uses
    (recorded by the embedder, else `keras-dml train`'s default with a warning);
    else the one the embedder records, or None (arrays and tf.data batches
    arrive prepared).
    """
    from keras_dml.data.sources import is_paths
    from keras_dml.data.stream_preprocessing import recorded_preprocessing
    from keras_dml.datasets import LabeledImages

    if preprocessing is not None:
        return preprocessing
    files = (isinstance(source, LabeledImages) and source.paths is not None) or (
        isinstance(source, (tuple, list)) and len(source) == 2 and is_paths(source[0]))
    return _file_preprocessing(embedder, None) if files else recorded_preprocessing(embedder)
