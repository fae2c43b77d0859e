"""The one embedding loop: finite batches in, `Embedded` chunks out.

Every embedding in keras_dml (evaluation, callbacks, the index, `keras-dml embed`,
`evaluate`, `index` and `search`, the retriever export's gallery) runs
`embedded_chunks`: one forward pass per batch, one progress line, one label rule
and one bad-image rule.

The label rule: a batch's labels are kept as given, one row per item; a `(batch, 1)`
column is read as `(batch,)`, and `(batch, k)` labels with `k > 1` (a class and a
group, say) stay `(N, k)` columns. Data without labels gives `labels=None`; data
whose batches carry labels only sometimes is refused.

The bad-image rule: an image file that cannot be read or decoded stops the
embedding with a `keras_dml.data.bad_images.BadImageError` naming the file and the
way out, unless the caller asks to skip (`skip_bad_images=True`, CLI
`--skip-bad-images`); then each bad file is named once on stderr, left out, and
listed in `Embedded.skipped`.
"""

import dataclasses
import typing

import keras
import numpy as np

from keras_dml.backend.trainer import steps as backend_steps
from keras_dml.data.image_errors import clear_data_error
from keras_dml.inference.batches import ArrayBatches
from keras_dml.inference.progress import Progress

__all__ = ["Embedded", "Prepared", "embed_finite", "embedded_batches", "embedded_chunks",
           "inference_function", "item_count", "joined", "label_column", "progress_line"]


@dataclasses.dataclass
class Embedded:
    """A model's embeddings of (part of) some data.

    Attributes:
        embeddings: float32 `(N, d)` (`(0, 0)` for a chunk whose every file was
            skipped).
        labels: The items' labels by the label rule (see the module), or None
            for data without labels.
        positions: int64 `(N,)`: each row's position in the data (a skipped file's
            position is missing).
        paths: The embedded image files, in order, for file data; else None.
        skipped: `[(path, reason)]` of the files left out (`skip_bad_images=True`),
            reason "missing" or "cannot be decoded", in order.
    """

    embeddings: np.ndarray
    labels: np.ndarray = None
    positions: np.ndarray = None
    paths: list = None
    skipped: list = dataclasses.field(default_factory=list)

    def __len__(self):
        return len(self.embeddings)


@dataclasses.dataclass
class Prepared:
    """Finite batches ready for the loop.

    Attributes:
        batches: `(x, y[, w])` or `x` batches (image files: `(x, positions)`).
        count: Items in the data, or None when unknown (the progress total).
        paths: Image file paths (then each batch's `y` holds the positions of the
            files it kept), else None.
        labels: The labels of `paths`, or None.
        batch_size: Files per batch (image files: what a batch covers).
    """

    batches: object
    count: int = None
    paths: list = None
    labels: object = None
    batch_size: int = None


def inference_function(model):
    """`model(x, training=False)` compiled for the running backend (a `tf.function` on
    TensorFlow, jitted on JAX, without gradient on PyTorch); build it once, embed many
    times."""
    return backend_steps().inference_function(model)


def label_column(y, rows):
    """One batch's labels by the label rule (see the module): a NumPy array of `rows`
    rows, `(batch, 1)` read as `(batch,)`."""
    y = np.asarray(y)
    if y.ndim == 0 or len(y) != rows:
        raise ValueError(f"A batch of {rows} items has labels of shape {y.shape}: one label "
                         "(or one row of labels) per item is needed.")
    return y.reshape(rows) if y.ndim == 2 and y.shape[1] == 1 else y


def embedded_batches(forward, batches):
    """Yields `(embeddings or None, labels or None)` per batch: float32 `(rows, d)` of
    `forward(x)` (None for a batch of no rows), and the batch's raw labels.

    Raises:
        keras_dml.data.bad_images.BadImageError: An image file of the stream cannot
            be read or decoded (named; the stream's own error translated once).
        ValueError: `forward` does not return `(batch, d)`.
    """
    iterator = iter(batches)
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except Exception as error:  # a bad image file: its own error, naming it
            clear = clear_data_error(error)
            if clear is None:
                raise
            raise clear from None
        x, y = (batch[0], batch[1] if len(batch) > 1 else None) \
            if isinstance(batch, (tuple, list)) else (batch, None)
        yield (_forward(forward, x) if _rows(x) else None), y


def _rows(x):
    first = keras.tree.flatten(x)[0]
    return len(first) if first.shape[0] is None else int(first.shape[0])


def _forward(forward, x):
    out = forward(x)
    if len(out.shape) != 2:
        raise ValueError(
            f"The model must return (batch, dim) embeddings, got shape {tuple(out.shape)}.")
    return keras.ops.convert_to_numpy(out).astype(np.float32, copy=False)


class _Batch(typing.NamedTuple):
    """One embedded batch: its embeddings (None: no rows), labels, positions, and the
    items `[first, end)` of the data it covers (image files: skipped ones included)."""

    embeddings: np.ndarray
    labels: np.ndarray
    positions: np.ndarray
    first: int
    end: int


def embedded_chunks(forward, prepared, chunk_size=None, progress=None):
    """Yields the `Embedded` of consecutive chunks of `prepared` (`Prepared`), each
    covering at least `chunk_size` items (the last one fewer); one chunk of all when
    `chunk_size` is None. `progress` (a `Progress`, or None) is told the items of each
    batch."""
    pending, start = [], 0
    for out, y in embedded_batches(forward, prepared.batches):
        rows = 0 if out is None else len(out)
        if prepared.paths is None:
            covered, positions = rows, np.arange(start, start + rows)
        else:  # y: the positions of the files the batch kept
            covered = min(prepared.batch_size, prepared.count - start)
            positions, y = np.asarray(y, np.int64).reshape(-1), None
        pending.append(_Batch(out, None if y is None else label_column(y, rows), positions,
                              start, start + covered))
        start += covered
        if progress is not None:
            progress.update(covered)
        if chunk_size is not None and pending[-1].end - pending[0].first >= chunk_size:
            yield _chunk(pending, prepared)
            pending = []
    if pending or chunk_size is None:
        yield _chunk(pending, prepared)


def _chunk(pending, prepared):
    """The `Embedded` of consecutive `_Batch`es."""
    embedded = [batch for batch in pending if batch.embeddings is not None]
    embeddings = np.concatenate([batch.embeddings for batch in embedded]) if embedded \
        else np.zeros((0, 0), np.float32)
    positions = np.concatenate([batch.positions for batch in pending]
                               or [np.zeros(0, np.int64)])
    if prepared.paths is None:
        return Embedded(embeddings, _labels([batch.labels for batch in embedded]), positions)
    labels = None if prepared.labels is None else np.asarray(prepared.labels)[positions]
    covered = np.arange(pending[0].first, pending[-1].end) if pending else positions
    bad = [prepared.paths[i] for i in np.setdiff1d(covered, positions)]
    return Embedded(embeddings, labels, positions, [prepared.paths[i] for i in positions],
                    _reasons(bad))


def _labels(parts):
    """`parts` (labels per batch, None where a batch has none) joined, or None.

    Raises:
        ValueError: Some batches have labels and others not.
    """
    given = [part is not None for part in parts]
    if any(given) and not all(given):
        raise ValueError("The data yields labels for only some batches.")
    return np.concatenate(parts) if parts and all(given) else None


def _reasons(paths):
    """`[(path, reason)]` of skipped files (decoded once more: they are few)."""
    if not paths:
        return []
    from keras_dml.data.verify import unreadable_files

    found = dict(unreadable_files(paths))
    return [(path, found.get(path, "cannot be decoded")) for path in paths]


def joined(chunks, name="data"):
    """All `chunks` (`Embedded`) as one.

    Raises:
        ValueError: Nothing was embedded (empty data, or every file skipped).
    """
    chunks = list(chunks)
    skipped = [entry for chunk in chunks for entry in chunk.skipped]
    kept = [chunk for chunk in chunks if len(chunk)]
    if not kept:
        if skipped:
            raise ValueError(f"No image of {name} could be read: every file was skipped "
                             f"({len(skipped)}, e.g. {skipped[0][0]}).")
        raise ValueError(f"{name} is empty: no batch to embed.")
    labels = _labels([c.labels for c in kept])
    paths = None if kept[0].paths is None else [p for c in kept for p in c.paths]
    return Embedded(np.concatenate([c.embeddings for c in kept]), labels,
                    np.concatenate([c.positions for c in kept]), paths, skipped)


def progress_line(progress, count=None):
    """The `Progress` that `progress` asks for: None for False, a new one over `count`
    items for True, else the object given (anything told `update(items)`)."""
    if progress is True:
        return Progress(count)
    return progress or None


def item_count(batches):
    """Items in finite batches, where known without reading them (arrays), else None."""
    return len(batches.x) if isinstance(batches, ArrayBatches) else None


def embed_finite(forward, batches, progress=False, name="data"):
    """`(embeddings, labels)` of finite batches (`keras_dml.inference.batches`) by a
    ready `forward(x)` (`inference_function`): the loop the callbacks and training run
    each epoch.

    Args:
        forward: `forward(x) -> (batch, d)`.
        batches: Finite `(x, y[, w])` or `x` batches.
        progress: True shows the progress line (`Progress`), or a `Progress` to tell.
            Defaults to False.
        name: The data's name in errors. Defaults to "data".

    Returns:
        float32 `(N, d)` embeddings and the labels by the label rule (None without).
    """
    count = item_count(batches)
    line = progress_line(progress, count)
    try:
        result = joined(embedded_chunks(forward, Prepared(batches, count), None, line), name)
    finally:
        if progress is True and line is not None:
            line.close()
    return result.embeddings, result.labels
