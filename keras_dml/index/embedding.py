"""What `Index.from_model` embeds and records: items and provenance of normalised data.

The embedding is `keras_dml.inference`'s; this module adds what an index needs
around it (a split's class names as labels, the image paths as metadata, the
preprocessing to record). `embed_batches`, `embed_source` and
`source_preprocessing` are the deprecated names of earlier releases.
"""

import warnings

import numpy as np

from keras_dml.data.inputs import SPLIT, as_data
from keras_dml.inference.entry import EMBEDDABLE, embed_data

__all__ = ["BATCH_FORMS", "SOURCE_FORMS", "embed_batches", "embed_source", "items",
           "recorded_preprocessing", "source_preprocessing"]

#: What `Index.from_model` takes: every form `keras_dml.inference.embed` takes.
SOURCE_FORMS = EMBEDDABLE
BATCH_FORMS = EMBEDDABLE


def items(model, data, batch_size=256, verbose=1, preprocessing=None, metadata=None,
          skip_bad_images=False):
    """`(embeddings, labels or None, metadata or None, skipped)` of a `Data` for an index.

    Labels: a `LabeledImages` split's class names, else the data's labels (one per
    item: `(N, k)` label columns are refused by `Index.add`). Metadata: `metadata`
    (one value per item of `data`), else the image paths of file data, else None;
    both without the files `skip_bad_images` left out (listed in `skipped`).
    """
    embedded = embed_data(model, data, batch_size, preprocessing=preprocessing,
                          skip_bad_images=skip_bad_images, progress=bool(verbose))
    labels = embedded.labels
    if data.form == SPLIT and labels is not None:
        labels = np.asarray(data.class_names, str)[labels]
    if metadata is not None:
        metadata = [metadata[i] for i in embedded.positions]
    return embedded.embeddings, labels, metadata or embedded.paths, embedded.skipped


def recorded_preprocessing(model, data, preprocessing=None):
    """The `Preprocessing` that makes a `Data`'s embeddings, to record with them.

    `preprocessing` when given; for image files, the one the embedding uses
    (recorded by the model, else `keras-dml train`'s default with a warning);
    else the one the model records, or None (arrays and streams arrive prepared).
    """
    from keras_dml.data import stream_preprocessing

    if preprocessing is not None:
        return preprocessing
    if data.files:
        return stream_preprocessing.model_preprocessing(model, None)
    return stream_preprocessing.recorded_preprocessing(model)


def _deprecated(old, new):
    from keras_dml.hyperparameters import deprecation

    warnings.warn(deprecation(f"keras_dml.index.embedding.{old}", f"use {new}"),
                  DeprecationWarning, stacklevel=3)


def embed_batches(embedder, dataset, batch_size=256, verbose=1, steps=None, progress=None):
    """Deprecated: `keras_dml.inference.embed(model, data)`; returns `(embeddings,
    labels or None)` (labels by the inference label rule)."""
    _deprecated("embed_batches", "keras_dml.inference.embed")
    embedded = embed_data(embedder, as_data(dataset, EMBEDDABLE, "dataset"), batch_size,
                          steps, progress=progress if progress is not None else bool(verbose))
    return embedded.embeddings, embedded.labels


def embed_source(embedder, source, batch_size=256, verbose=1, preprocessing=None):
    """Deprecated: `keras_dml.inference.embed`; returns `(embeddings, labels or None,
    paths or None)` (a split's labels as its class names)."""
    _deprecated("embed_source", "keras_dml.inference.embed")
    data = as_data(source, EMBEDDABLE, "dataset")
    embeddings, labels, _, _ = items(embedder, data, batch_size, verbose, preprocessing)
    return embeddings, labels, list(data.x) if data.files else None


def source_preprocessing(embedder, source, preprocessing=None):
    """Deprecated: the `Preprocessing` `Index.from_model` records (see
    `recorded_preprocessing`)."""
    _deprecated("source_preprocessing", "Index.from_model(...).provenance")
    return recorded_preprocessing(embedder, as_data(source, EMBEDDABLE, "dataset"),
                                  preprocessing)
