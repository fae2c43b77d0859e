"""Bringing an index up to date with a catalogue of image files, in bounded chunks.

`sync(index, catalogue, embed)` compares the catalogue's ids (paths relative
to its folder) with the ids the index holds, embeds only the missing files,
`chunk_size` at a time, and upserts each chunk before embedding the next: the
memory held is one chunk of images and embeddings, whatever the catalogue's
size, and a job killed at any moment is resumed by running it again (what is
stored is skipped, what is missing is embedded; upserts by id never
duplicate). With `update=True` the items whose files are gone are removed.

A file that cannot be read or decoded follows the embedding's bad-image rule
(`keras_dml.inference.loop`): the sync stops with an error naming it (the chunks
stored before it stay; the next run resumes after them), unless the chunks are
embedded with `skip_bad_images=True`: then it is left out, reported in one line,
and tried again by the next run.
"""

import dataclasses
import sys

import numpy as np

__all__ = ["CHUNK_SIZE", "SyncReport", "sync"]

#: Images embedded and stored per step: bounds the memory of a long indexing job.
CHUNK_SIZE = 2048
#: Ids asked of the index at a time when comparing it with the catalogue.
CHECK_ROWS = 10_000


@dataclasses.dataclass
class SyncReport:
    """What `sync` did.

    Attributes:
        added: Items embedded and stored by this run.
        kept: Items already in the index (stored by an earlier run).
        removed: Items removed because their files are gone (`update=True`).
        gone: Items whose files are gone but were kept (`update=False`).
        unreadable: `"path (reason)"` of each file left out because it could not be
            read or decoded.
    """

    added: int = 0
    kept: int = 0
    removed: int = 0
    gone: int = 0
    unreadable: list = dataclasses.field(default_factory=list)


def sync(index, catalogue, embed_chunks, chunk_size=CHUNK_SIZE, update=False, progress=None,
         log=None):
    """Adds the catalogue's missing files to `index` (and removes the gone ones).

    Args:
        index: A `keras_dml.index.Index` with string ids (e.g. on Milvus).
        catalogue: A `keras_dml.index.catalogue.Catalogue`; its ids become the items'
            ids and metadata, its class names their labels.
        embed_chunks: `embed_chunks(paths, chunk_size)` yielding the
            `keras_dml.inference.Embedded` of consecutive chunks of `paths` (e.g.
            `functools.partial(keras_dml.index.runs.embed_chunks, run)`).
        chunk_size: Files embedded and stored per step. Defaults to `CHUNK_SIZE`.
        update: Also remove the items whose files are no longer listed.
            Defaults to False (they are counted in `gone`).
        progress: A `keras_dml.inference.Progress` that `embed_chunks` tells, given
            the files to embed as its total here. Defaults to None.
        log: Where unreadable files are reported, one line each. Defaults to stderr.

    Returns:
        A `SyncReport`.
    """
    log = log or sys.stderr
    listed = np.asarray(catalogue.ids, str)
    stored = np.concatenate([index.contains(listed[i:i + CHECK_ROWS])
                             for i in range(0, len(listed), CHECK_ROWS)] or [np.zeros(0, bool)])
    report = SyncReport(kept=int(stored.sum()))
    gone = len(index) - report.kept
    if update and gone:
        keep = set(catalogue.ids)
        removed = [i for i in index.ids.tolist() if i not in keep]
        index.remove(removed)
        report.removed = len(removed)
    else:
        report.gone = gone
    missing = {catalogue.paths[p]: p for p in np.flatnonzero(~stored).tolist()}
    del stored, listed
    if progress is not None:
        progress.total = len(missing)
    from keras_dml.data.image_errors import skipped_sentence

    for chunk in embed_chunks(list(missing), chunk_size):
        problems = [f"{path} ({reason})" for path, reason in chunk.skipped]
        for path, reason in chunk.skipped:
            print(f"keras_dml.index: {skipped_sentence(path, reason)}", file=log, flush=True)
        report.unreadable.extend(problems)
        if len(chunk):
            ids = [catalogue.ids[missing[path]] for path in chunk.paths]
            index.upsert(chunk.embeddings, ids=ids,
                         labels=[catalogue.labels[missing[path]] for path in chunk.paths],
                         metadata=ids)
            report.added += len(chunk)
    return report
