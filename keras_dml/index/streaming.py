"""Bringing an index up to date with a catalogue of image files, in bounded chunks.

`sync(index, catalogue, embed)` compares the catalogue's ids (paths relative
to its folder) with the ids the index holds, embeds only the missing files,
`chunk_size` at a time, and upserts each chunk before embedding the next: the
memory held is one chunk of images and embeddings, whatever the catalogue's
size, and a job killed at any moment is resumed by running it again (what is
stored is skipped, what is missing is embedded; upserts by id never
duplicate). With `update=True` the items whose files are gone are removed.

Before it changes anything, `sync` checks the catalogue against the one the
collection records (its root and id layout, `keras_dml.index.safeguards`) and,
for an update, the bound on removals (`max_removals`, default 10 % of the items);
`dry_run=True` reports what a run would add and remove and changes nothing.

A file that cannot be read or decoded follows the embedding's bad-image rule
(`keras_dml.inference.loop`): the sync stops with an error naming it (the chunks
stored before it stay; the next run resumes after them), unless the chunks are
embedded with `skip_bad_images=True`: then it is left out, reported in one line,
and tried again by the next run.
"""

import dataclasses
import os
import sys

import numpy as np

from keras_dml.index import safeguards

__all__ = ["CHUNK_SIZE", "SyncReport", "sync"]

#: Images embedded and stored per step: bounds the memory of a long indexing job.
CHUNK_SIZE = 2048
#: Ids asked of the index at a time when comparing it with the catalogue.
CHECK_ROWS = 10_000


@dataclasses.dataclass
class SyncReport:
    """What `sync` did, or would do (`dry_run`).

    Attributes:
        added: Items embedded and stored by this run.
        kept: Items already in the index (stored by an earlier run).
        removed: Items removed because their files are gone (`update=True`).
        gone: Items whose files are gone but were kept (`update=False`).
        unreadable: `"path (reason)"` of each file left out because it could not be
            read or decoded.
        to_add: Ids of the listed files the index did not hold (embedded by this
            run, unless it is a dry run or a file is unreadable).
        to_remove: Ids an update removes (removed, unless it is a dry run).
        dry_run: Nothing was changed.
        refusal: In a dry run, why the run itself would be refused (else None).
        removals_file: Where the removed items were written, or None.
    """

    added: int = 0
    kept: int = 0
    removed: int = 0
    gone: int = 0
    unreadable: list = dataclasses.field(default_factory=list)
    to_add: list = dataclasses.field(default_factory=list)
    to_remove: list = dataclasses.field(default_factory=list)
    dry_run: bool = False
    refusal: str = None
    removals_file: str = None


def sync(index, catalogue, embed_chunks, chunk_size=CHUNK_SIZE, update=False, progress=None,
         log=None, *, dry_run=False, max_removals=safeguards.MAX_REMOVALS, move_root=False,
         removals_file=None):
    """Adds the catalogue's missing files to `index` (and removes the gone ones).

    Args:
        index: A `keras_dml.index.Index` with string ids (e.g. on Milvus).
        catalogue: A `keras_dml.index.catalogue.Catalogue`; its ids, class names and
            metadata become the items' ids, labels and metadata.
        embed_chunks: `embed_chunks(paths, chunk_size)` yielding the
            `keras_dml.inference.Embedded` of consecutive chunks of `paths` (e.g.
            `functools.partial(keras_dml.index.runs.embed_chunks, run)`).
        chunk_size: Files embedded and stored per step. Defaults to `CHUNK_SIZE`.
        update: Also remove the items whose files are no longer listed.
            Defaults to False (they are counted in `gone`).
        progress: A `keras_dml.inference.Progress` that `embed_chunks` tells, given
            the files to embed as its total here. Defaults to None.
        log: Where unreadable files are reported, one line each. Defaults to stderr.
        dry_run: Only report what would be added and removed: nothing is embedded,
            stored, removed or recorded. Defaults to False.
        max_removals: The most items an update may remove: a count, or `"P%"` of the
            items (rounded up); None for no bound. Defaults to `"10%"`.
        move_root: The catalogue's root moved: record the new one, provided the
            stored ids are found under it (at most `max_removals` of them missing).
            Defaults to False (another root is refused).
        removals_file: A new file where an update writes the items it removes
            (`safeguards.write_removals`) before removing them. Defaults to None.

    Returns:
        A `SyncReport`.

    Raises:
        ValueError: The index records another catalogue root or id layout, or the
            update would remove more than `max_removals` (nothing is changed).
        FileExistsError: `removals_file` exists (nothing is changed).
    """
    log = log or sys.stderr
    given = safeguards.layout_of(catalogue)
    recorded = safeguards.recorded_layout(index.info)
    safeguards.check_layout(recorded, given, move_root)
    moved = recorded is not None and recorded["root"] != given["root"]
    listed = np.asarray(catalogue.ids, str)
    stored = np.concatenate([index.contains(listed[i:i + CHECK_ROWS])
                             for i in range(0, len(listed), CHECK_ROWS)] or [np.zeros(0, bool)])
    size = len(index)
    report = SyncReport(kept=int(stored.sum()), dry_run=dry_run)
    gone = size - report.kept
    refusal = safeguards.removal_refusal(gone, size, len(listed), given["root"], max_removals,
                                         moved) if update or moved else None
    if refusal is not None and not dry_run:
        raise ValueError(refusal)
    if removals_file is not None and os.path.exists(removals_file):
        raise FileExistsError(f"{removals_file} exists: the removals file is never "
                              "overwritten; give a new path.")
    report.refusal = refusal
    missing = np.flatnonzero(~stored).tolist()
    report.to_add = [catalogue.ids[p] for p in missing]
    if update and gone:
        report.to_remove = _gone_ids(index, set(catalogue.ids))
    else:
        report.gone = gone
    if dry_run:
        return report
    if index.info.get(safeguards.RECORD_KEY) != given:  # "root" alone: the former record
        info = {key: value for key, value in index.info.items() if key != "root"}
        index.info = {**info, safeguards.RECORD_KEY: given}
    if report.to_remove:
        if removals_file is not None:
            _write_removals(index, report.to_remove, removals_file, given)
            report.removals_file = removals_file
        index.remove(report.to_remove)
        report.removed = len(report.to_remove)
    missing = {catalogue.paths[p]: p for p in missing}
    del stored, listed
    _add(index, catalogue, embed_chunks, missing, chunk_size, progress, log, report)
    return report


def _gone_ids(index, keep):
    return [i for i in index.ids.tolist() if i not in keep]


def _write_removals(index, ids, path, layout):
    """The items of `ids` (with their labels and metadata) written to `path`."""
    order = {item: n for n, item in enumerate(index.ids.tolist())}
    labels, metadata = index.labels.tolist(), index.metadata
    rows = [order[item] for item in ids]
    safeguards.write_removals(path, ids, [labels[r] for r in rows],
                              [metadata[r] for r in rows], layout)


def _add(index, catalogue, embed_chunks, missing, chunk_size, progress, log, report):
    """Embeds the `missing` files (path -> catalogue position) chunk by chunk and upserts
    each chunk."""
    if progress is not None:
        progress.total = len(missing)
    for chunk in embed_chunks(list(missing), chunk_size):
        problems = [f"{path} ({reason})" for path, reason in chunk.skipped]
        for problem in problems:
            print(f"keras_dml.index: skipped {problem}", file=log, flush=True)
        report.unreadable.extend(problems)
        if len(chunk):
            rows = [missing[path] for path in chunk.paths]
            index.upsert(chunk.embeddings, ids=[catalogue.ids[i] for i in rows],
                         labels=[catalogue.labels[i] for i in rows],
                         metadata=[catalogue.metadata[i] for i in rows])
            report.added += len(chunk)
