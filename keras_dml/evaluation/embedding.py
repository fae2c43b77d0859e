"""Embed data with a model and evaluate retrieval on it.

The embedding itself is `keras_dml.inference` (one loop for every embedding in
keras_dml); this module keeps the evaluation's entry points and, for code that
imports them from here, that package's names.
"""

from keras_dml import hyperparameters
from keras_dml.data.inputs import as_data
from keras_dml.evaluation.retrieval import METRICS, retrieval_metrics
from keras_dml.inference import (  # noqa: F401 (re-exported: their earlier home)
    ArrayBatches,
    Batches,
    as_dataset,
    embed_finite,
    finite_batches,
    finite_dataset,
    inference_function,
)
from keras_dml.inference.entry import EMBEDDABLE, LABELLED, embed_data, embed_prepared, prepare

__all__ = ["embed_dataset", "embed_with", "evaluate_retrieval"]


def embed_dataset(model, data, batch_size=256, steps=None, *, skip_bad_images=False):
    """Run `model` over `data` in inference mode; return `(embeddings, labels)`.

    Args:
        model: a Keras model (or any callable `model(x, training=False)`) that
            maps a batch to (batch, dim) embeddings.
        data: any form `keras_dml.inference.embed` takes: a `tf.data.Dataset`, a
            `keras.utils.PyDataset` or an iterable of `(x, y)` or
            `(x, y, sample_weight)` batches, arrays, or a
            `keras_dml.datasets.LabeledImages` split or `(paths, labels)` of image
            files, prepared as the model records (`model.preprocessing` of a
            fitted `DMLModel` or its `embedder()`; else `keras-dml train`'s for its
            input, with a warning).
        batch_size: batch size used when `data` is arrays or files. Defaults
            to 256.
        steps: batches taken from a dataset. Defaults to None: all of it (an
            infinite or unknown-length dataset is refused, see `finite_dataset`).
        skip_bad_images: leave out unreadable image files (named on stderr)
            instead of stopping at the first. Defaults to False.

    Returns:
        float32 NumPy embeddings (N, dim) and NumPy labels (the label rule of
        `keras_dml.inference.loop`: (N,), or (N, k) label columns; None for data
        without labels).
    """
    embedded = embed_data(model, as_data(data, EMBEDDABLE, "data"), batch_size, steps,
                          skip_bad_images=skip_bad_images)
    return embedded.embeddings, embedded.labels


def embed_with(forward, data, batch_size=256, progress=False, steps=None):
    """Like `embed_dataset`, with a ready `forward(x)` from `inference_function`, for
    batch streams (`BATCH_STREAMS`). `progress=True` shows the progress line."""
    return embed_finite(forward, as_dataset(data, batch_size, steps), progress)


@hyperparameters.renamed_keywords(distance="metric", dataset="data",
                                 reference_dataset="gallery_data")
def evaluate_retrieval(
    model,
    data,
    gallery_data=None,
    ks=(1, 2, 4, 8),
    metrics=METRICS,
    metric="cosine",
    chunk_size=None,
    batch_size=256,
    steps=None,
):
    """Embed `data` (and `gallery_data`) with `model`; return `retrieval_metrics`.

    Args:
        model: a Keras model mapping inputs to (batch, dim) embeddings.
        data: the queries, labelled, in any form `embed_dataset` takes (image
            files are prepared as the model records).
        gallery_data: the gallery in the same forms. Defaults to None:
            leave-one-out on the queries.
        ks, metrics, metric, chunk_size: see `retrieval_metrics`. (`distance=`,
            `dataset=` and `reference_dataset=` are the deprecated names of
            `metric=`, `data=` and `gallery_data=`.)
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
    data = as_data(data, LABELLED, "data")
    if gallery_data is not None:
        gallery_data = as_data(gallery_data, LABELLED, "gallery_data")
    queries = prepare(model, data, batch_size, steps)
    if gallery_data is not None:
        gallery_data = prepare(model, gallery_data, batch_size, steps, name="gallery_data")
    forward = inference_function(model)
    queries = embed_prepared(forward, queries)
    gallery = None if gallery_data is None else embed_prepared(forward, gallery_data,
                                                              name="gallery_data")
    return retrieval_metrics(
        queries.embeddings, queries.labels, None if gallery is None else gallery.embeddings,
        None if gallery is None else gallery.labels, ks, metrics, metric, chunk_size)
