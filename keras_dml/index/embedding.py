"""Embedding a dataset, a split or image files for an index, with a progress bar."""

import keras
import numpy as np

from keras_dml import backend
from keras_dml.data.inputs import ARRAYS, DATASET, FILES, IMAGES, SPLIT, Data, as_data
from keras_dml.data.options import steady
from keras_dml.evaluation.embedding import finite_dataset, inference_function

tf = backend.require_tensorflow("keras_dml.index.embedding (embedding image files and tf.data)")

BATCH_FORMS = (DATASET, ARRAYS, IMAGES)  # what embed_batches takes
SOURCE_FORMS = (SPLIT, FILES, *BATCH_FORMS)  # what embed_source and Index.from_model take


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
    data = as_data(dataset, BATCH_FORMS, "dataset")
    if data.form == DATASET:
        dataset = finite_dataset(data.x, steps, "dataset")
    else:
        dataset = tf.data.Dataset.from_tensor_slices(
            data.x if data.form == IMAGES else (data.x, data.y))
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

    data = as_data(source, SOURCE_FORMS, "dataset")
    if not data.files and data.form != SPLIT:
        embeddings, labels = embed_batches(embedder, data, batch_size, verbose)
        return embeddings, labels, None
    batches = evaluation_batches(
        data, _file_preprocessing(embedder, preprocessing) if data.files else preprocessing,
        batch_size=batch_size)
    embeddings, _ = embed_batches(embedder, Data(DATASET, batches), verbose=verbose)
    if data.form == SPLIT:  # labels: its class names
        labels = np.asarray(data.class_names, str)[data.y]
    else:  # (paths, labels): the labels as given
        labels = np.asarray(data.y)
    return embeddings, labels, list(data.x) if data.files else None


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
    from keras_dml.data.stream_preprocessing import recorded_preprocessing

    if preprocessing is not None:
        return preprocessing
    files = as_data(source, SOURCE_FORMS, "dataset").files
    return _file_preprocessing(embedder, None) if files else recorded_preprocessing(embedder)
