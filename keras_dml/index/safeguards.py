"""What a catalogue sync checks before it changes a collection, and what it keeps.

A collection synced with a catalogue records, in its info, where the catalogue's
ids come from:

    info["catalogue"] = {"root": "/abs/folder", "ids": "relative_path"}

`root` is the folder the ids are relative to; `ids` the id layout:
`"relative_path"` (paths relative to `root`, the only layout of a folder) or
`"column:<name>"` (ids read from a CSV column), taken from the catalogue's
`id_layout` attribute when it has one. A sync with another layout, or another
root, is refused before anything is embedded or removed: the same photos listed
from a parent folder get other ids (`catalogue/cat/1.jpg` for `cat/1.jpg`) and
would be stored twice, or removed. A root that moved with the same layout below
it is re-recorded when asked (`move_root=True`), after checking that the stored
ids are found under the new root (at most the removal bound of them missing).

An update removes at most a bound of the items (`max_removals`: a count, or a
percentage of the items, rounded up; default 10 %): a folder half synced, or
mounted at the wrong place, otherwise empties the collection. The items an update
removes can be written first to a JSON-lines file (`write_removals`), one
`{"id", "label", "metadata", "path"}` per line, so they can be put back.
"""

import datetime
import json
import math
import os

__all__ = ["ID_LAYOUT", "MAX_REMOVALS", "RECORD_KEY", "check_layout", "layout_of",
           "new_removals_file", "parse_max_removals", "recorded_layout", "removal_bound",
           "removal_refusal", "write_removals"]

#: The id layout of a folder's catalogue: paths relative to its root.
ID_LAYOUT = "relative_path"
#: The default bound on what one update removes.
MAX_REMOVALS = "10%"
#: The key of `Index.info` that records the catalogue.
RECORD_KEY = "catalogue"


def layout_of(catalogue):
    """`{"root", "ids"}` of a `keras_dml.index.catalogue.Catalogue`: its root and id
    layout (its `id_layout` attribute, `ID_LAYOUT` when it has none)."""
    return {"root": catalogue.root, "ids": getattr(catalogue, "id_layout", None) or ID_LAYOUT}


def recorded_layout(info):
    """The catalogue recorded in an index's info, or None when none is.

    A collection that recorded only `info["root"]` holds relative paths.
    """
    recorded = info.get(RECORD_KEY)
    if isinstance(recorded, dict) and "root" in recorded:
        return {"root": recorded["root"], "ids": recorded.get("ids", ID_LAYOUT)}
    if isinstance(info.get("root"), str):
        return {"root": info["root"], "ids": ID_LAYOUT}
    return None


def check_layout(recorded, given, move_root=False):
    """Refuses a catalogue with another id layout, or another root unless `move_root`.

    Raises:
        ValueError: Naming both layouts, or both roots and the ways forward.
    """
    if recorded is None:
        return
    if recorded["ids"] != given["ids"]:
        raise ValueError(
            f"The collection's ids are {_layout_words(recorded['ids'])}, but these images' "
            f"ids are {_layout_words(given['ids'])}: every item would be stored a second "
            "time under another id. Keep the recorded layout, or index into a new "
            "collection (collection=NAME).")
    if recorded["root"] != given["root"] and not move_root:
        raise ValueError(
            f"The collection holds the catalogue of {recorded['root']}, and these images are "
            f"listed from {given['root']}: their ids (paths relative to the folder) would "
            "differ, and each photo be stored twice, or removed by an update. Give the "
            f"folder {recorded['root']}; if the catalogue moved there with the same "
            "folders below it, pass move_root=True; otherwise index into a new collection "
            "(collection=NAME).")


def _layout_words(layout):
    if layout == ID_LAYOUT:
        return "paths relative to the catalogue folder"
    if layout.startswith("column:"):
        return f"the CSV column {layout.split(':', 1)[1]!r}"
    return repr(layout)


def parse_max_removals(value):
    """`value` checked as a bound: a count (int or digits) or a percentage `"P%"`
    (0-100); None for no bound.

    Raises:
        ValueError: Anything else, naming it.
    """
    if value is None:
        return None
    text = str(value).strip()
    number = text[:-1].strip() if text.endswith("%") else text
    try:
        amount = float(number) if text.endswith("%") else int(number)
    except ValueError:
        amount = -1
    if isinstance(value, float) or amount < 0 or text.endswith("%") and amount > 100:
        raise ValueError(f"max_removals must be a count of items (e.g. 50) or a percentage "
                         f"of them (e.g. 10%, at most 100%), got {value!r}.")
    return text if text.endswith("%") else int(amount)


def removal_bound(max_removals, size):
    """The most items an update of a collection of `size` items may remove (a
    percentage rounded up, so a small collection may lose one item); None for no
    bound."""
    bound = parse_max_removals(max_removals)
    if isinstance(bound, str):
        return math.ceil(float(bound[:-1]) * size / 100 - 1e-9)
    return bound


def removal_refusal(gone, size, listed, root, max_removals, moved):
    """Why removing (or, for a moved root, not finding) `gone` of `size` items is
    refused, or None when it is within the bound.

    Args:
        gone: Items whose ids the catalogue does not list.
        size: Items in the collection.
        listed: Files the catalogue lists.
        root: The catalogue's root.
        max_removals: The bound (see `parse_max_removals`).
        moved: The root moved (`move_root=True`): the stored ids must be found under
            the new one.
    """
    bound = removal_bound(max_removals, size)
    if bound is None or gone <= bound:
        return None
    share = f"{gone} of the {size} items ({100 * gone / size:.0f} %)"
    if moved:
        return (f"Moving the catalogue root to {root} would leave {share} without a file: "
                f"the folders below it differ from the recorded root's (the bound is {bound}, "
                f"max_removals={max_removals}). Nothing was changed. See which with "
                "dry_run=True; a catalogue with another layout needs a new collection "
                "(collection=NAME).")
    return (f"update=True would remove {share}: their files are not among the {listed} "
            f"listed under {root}, and the bound is {bound} (max_removals={max_removals}). "
            "Nothing was changed. A folder only partly synced or mounted elsewhere looks "
            "like this: see which items with dry_run=True; if their files are really gone, "
            f"pass max_removals={gone} (or 100%).")


def new_removals_file(folder, collection, now=None):
    """A path in `folder` for the removals of an update of `collection`, named by
    the UTC time (`20261129T021530Z-<collection>.jsonl`) and never an existing file."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    stem = f"{now.strftime('%Y%m%dT%H%M%SZ')}-{collection}"
    path, number = os.path.join(folder, f"{stem}.jsonl"), 1
    while os.path.exists(path):
        number += 1
        path = os.path.join(folder, f"{stem}-{number}.jsonl")
    return path


def write_removals(path, ids, labels, metadata, layout):
    """Writes the items about to be removed to a new JSON-lines file at `path`, one
    `{"id", "label", "metadata", "path"}` per line (`path`: the file it was listed
    from: its metadata's "path", or for relative-path ids the id, joined to the root;
    else None).

    Raises:
        FileExistsError: `path` exists (it is never overwritten).
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    relative = layout["ids"] == ID_LAYOUT
    with open(path, "x", encoding="utf-8") as handle:
        for item, label, data in zip(ids, labels, metadata):
            listed = data.get("path") if isinstance(data, dict) else None
            listed = listed or (item if relative else None)
            where = None if listed is None else os.path.join(layout["root"], listed)
            handle.write(json.dumps({"id": item, "label": label, "metadata": data,
                                     "path": where}) + "\n")
        handle.flush()
        os.fsync(handle.fileno())
    return path
