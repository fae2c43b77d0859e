"""`embed` and `embed_chunks`: a model's embeddings of any data, whole or in chunks.

The public functions normalise the user's data once (`as_data`); `embed_data`,
`embed_data_chunks` and `prepare` take that `Data` (what a public function of a
higher floor hands on after its own `as_data`).
"""

import numpy as np

from keras_dml.data.inputs import ARRAYS, BATCHES, DATASET, EMBEDDABLE, FILES, LABELLED, \
    PYDATASET, SPLIT, Data, as_data
from keras_dml.hyperparameters import integer_at_least
from keras_dml.inference.batches import finite_batches
from keras_dml.inference.loop import (Prepared, embedded_chunks, inference_function, joined,
                                      progress_line)

__all__ = ["EMBEDDABLE", "LABELLED", "embed", "embed_chunks", "embed_data",
           "embed_data_chunks", "embed_prepared", "prepare"]

_STREAMS = (DATASET, PYDATASET, BATCHES)


def embed(model, data, batch_size=256, steps=None, *, preprocessing=None,
          skip_bad_images=False, progress=False):
    """Runs `model` over `data` in inference mode: the `Embedded` of every item.

    Args:
        model: A Keras model (or any callable `model(x, training=False)`) mapping a
            batch to `(batch, d)` embeddings.
        data: Any form of `keras_dml.data.inputs.FORMS`: arrays (with or without
            labels), image files (`(paths, labels)`, a list of paths, a
            `LabeledImages` split), or finite batches (a `tf.data.Dataset`, a
            `keras.utils.PyDataset`, a list of `(x, y)` batches).
        batch_size: Items per batch of arrays and files. Defaults to 256.
        steps: Batches taken from a stream. Defaults to None: all of it (an
            infinite or unknown-length stream is refused, see `finite_dataset`).
        preprocessing: The `keras_dml.data.Preprocessing` of image files. Defaults
            to None: the one `model` records, else `keras-dml train`'s for its input
            size, with a warning. In-memory images and streams arrive prepared.
        skip_bad_images: Leave out image files that cannot be read or decoded
            (named once each on stderr, listed in `Embedded.skipped`) instead of
            stopping at the first. Defaults to False.
        progress: True shows the progress line (`Progress`: items, items per
            second, time left), or a `Progress` to tell. Defaults to False.

    Returns:
        An `Embedded`: float32 embeddings, labels (the label rule of
        `keras_dml.inference.loop`), positions, paths of file data, skipped files.

    Raises:
        keras_dml.data.bad_images.BadImageError: An image file cannot be read or
            decoded (named), and `skip_bad_images` is False.
        ValueError: `data` is in no form, empty or endless; the model does not
            return `(batch, d)`.
    """
    return embed_data(model, as_data(data, EMBEDDABLE, "data"), batch_size, steps,
                      preprocessing=preprocessing, skip_bad_images=skip_bad_images,
                      progress=progress)


def embed_chunks(model, data, chunk_size, batch_size=256, *, preprocessing=None,
                 skip_bad_images=False, progress=None):
    """`embed` in bounded chunks: an iterator of `Embedded`, each covering `chunk_size`
    items or more (the last one fewer), for streaming into a store.

    One pipeline and one compiled forward pass serve every chunk, so memory follows
    `chunk_size`, not the data's size. A chunk's `positions` index the whole data;
    with `skip_bad_images` a chunk may hold skipped files only (`len(chunk) == 0`).
    Arguments as in `embed`; `progress` is a `Progress` to tell (or None), which the
    caller closes.
    """
    chunk_size = integer_at_least("chunk_size", chunk_size, 1, strict=True)
    return embed_data_chunks(model, as_data(data, EMBEDDABLE, "data"), chunk_size,
                             batch_size, preprocessing=preprocessing,
                             skip_bad_images=skip_bad_images, progress=progress)


def embed_data(model, data, batch_size=256, steps=None, *, preprocessing=None,
               skip_bad_images=False, progress=False, name="data"):
    """`embed` of data normalised already (a `Data`); `name` is the argument's name in
    errors."""
    prepared = prepare(model, data, batch_size, steps, preprocessing, skip_bad_images, name)
    return embed_prepared(inference_function(model), prepared, progress, name)


def embed_prepared(forward, prepared, progress=False, name="data"):
    """The `Embedded` of `Prepared` batches by a ready `forward` (`inference_function`)."""
    line = progress_line(progress, prepared.count)
    try:
        return joined(embedded_chunks(forward, prepared, None, line), name)
    finally:
        if progress is True and line is not None:
            line.close()


def embed_data_chunks(model, data, chunk_size, batch_size=256, *, preprocessing=None,
                      skip_bad_images=False, progress=None):
    """`embed_chunks` of data normalised already (a `Data`)."""
    prepared = prepare(model, data, batch_size, None, preprocessing, skip_bad_images)
    return embedded_chunks(inference_function(model), prepared, chunk_size, progress)


def prepare(model, data, batch_size=256, steps=None, preprocessing=None,
            skip_bad_images=False, name="data"):
    """The `Prepared` batches of a `Data` for `model`.

    Image files become `keras_dml.data.evaluation_batches` prepared with
    `preprocessing` (default: as the model records, `model_preprocessing`), each
    batch labelled with its files' positions; an in-memory `LabeledImages` becomes
    its `(images, labels)`; a keras_dml stream prepared otherwise than the model
    records gets a warning.
    """
    from keras_dml.data.stream_preprocessing import (model_preprocessing,
                                                     stream_preprocessing,
                                                     warn_if_prepared_otherwise)

    if data.files:
        from keras_dml.data.evaluation_stream import evaluation_stream

        batch_size = integer_at_least("batch_size", batch_size, 1, strict=True)
        paths = list(data.x)
        positions = Data(FILES, paths, np.arange(len(paths), dtype=np.int64))
        batches = evaluation_stream(positions, model_preprocessing(model, preprocessing),
                                    batch_size, skip_bad_images=skip_bad_images)
        return Prepared(batches, len(paths), paths, data.y, batch_size)
    if data.form == SPLIT:
        data = Data(ARRAYS, data.x, data.y)
    elif data.form in _STREAMS:
        warn_if_prepared_otherwise(model, stream_preprocessing(data.x))
    batches = finite_batches(data, batch_size, steps, name)
    return Prepared(batches, None if data.form in _STREAMS else len(data.x))
