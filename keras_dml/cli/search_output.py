"""The answers of `keras-dml search` as text, one JSON document, or CSV rows.

Every format shows each result's similarity (the score a threshold is calibrated
on, re-ranked or not), the re-ranking score where `--rerank` re-ordered the
results, and the match decision where a threshold applies: the first result's
label when its similarity reaches the threshold. Rows a store padded (an
approximate index that found fewer than k) are left out.
"""

import csv
import json
import math
import sys

__all__ = ["CSV_COLUMNS", "FORMATS", "make_output"]

FORMATS = ("text", "json", "csv")
CSV_COLUMNS = ("query", "rank", "id", "label", "class_name", "similarity", "rerank_score",
               "matched", "metadata")


def make_output(format, about, class_names, stream=None):
    """The writer of `format` to `stream` (default stdout).

    Args:
        format: One of `FORMATS`.
        about: The JSON document's header: what answered (index, collection,
            model fingerprint, run, metric) and how (k, threshold, rerank,
            filter, labels).
        class_names: The index's class names (labels are their positions), or None.
    """
    writer = {"text": TextOutput, "json": JsonOutput, "csv": CsvOutput}[format]
    return writer(about, class_names, sys.stdout if stream is None else stream)


class _Output:
    """Turns search results into one record per (query, rank)."""

    def __init__(self, about, class_names, stream):
        self.about, self.class_names, self.stream = about, class_names, stream
        self.threshold = about["threshold"]
        self.reranked = about["rerank"] is not None

    def write(self, queries, result):
        """Writes the answers of `queries` (their paths as shown) from a `SearchResult`."""
        for row, query in enumerate(queries):
            items = [self._item(result, row, rank) for rank in range(result.ids.shape[1])
                     if math.isfinite(result.similarities[row, rank])]
            matched = None
            if self.threshold is not None:  # the first result's similarity, as computed
                matched = bool(items) and bool(result.similarities[row, 0] >= self.threshold)
            self.answer(query, matched, items)

    def _item(self, result, row, rank):
        label = _plain(result.labels[row, rank])
        named = (self.class_names[label] if self.class_names and isinstance(label, int)
                 and 0 <= label < len(self.class_names) else None)
        return {"rank": rank + 1, "id": _plain(result.ids[row, rank]), "label": label,
                "class_name": named,
                "similarity": _number(result.similarities[row, rank]),
                "rerank_score": _number(result.scores[row, rank]) if self.reranked else None,
                "metadata": result.metadata[row][rank]}

    def unread(self, path, reason, line=None):
        """A query that could not be read: named on stderr (`line`, or `PATH (REASON)`)."""
        print(f"keras-dml search: error: {line or f'{path} ({reason})'}", file=sys.stderr)

    def close(self):
        """Ends the output (the JSON document's closing part)."""


class TextOutput(_Output):
    """`QUERY  match: LABEL`, then `  1. ITEM  label LABEL  score S  [rerank R]  [KEY=VALUE]`."""

    def answer(self, query, matched, items):
        decision = ""
        if matched is not None:  # not matched: the unknown label, -1 or "" (shown as -)
            unknown = "-" if items and isinstance(items[0]["label"], str) else "-1"
            decision = f"  match: {self._label(items[0]) if matched else unknown}"
        print(f"{query}{decision}", file=self.stream)
        for item in items:
            rerank = "" if item["rerank_score"] is None else f"  rerank {item['rerank_score']:.4f}"
            print(f"  {item['rank']:>2}. {_name(item)}  label {self._label(item):<10} score "
                  f"{item['similarity']:.4f}{rerank}{_fields(item)}", file=self.stream)

    @staticmethod
    def _label(item):
        label = str(item["label"]) if str(item["label"]) else "-"
        return label if item["class_name"] is None else f"{label} ({item['class_name']})"


class JsonOutput(_Output):
    """One document: `about`'s fields, `queries` (each with `query`, `matched` and its
    `results`) and `unread`; written as the answers come."""

    def __init__(self, about, class_names, stream):
        super().__init__(about, class_names, stream)
        self.started, self.unreadable = False, []

    def answer(self, query, matched, items):
        self.stream.write(("\n" if self._start() else ",\n") + json.dumps(
            {"query": query, "matched": matched, "results": items}))

    def _start(self):
        """Writes the document's head once; whether it did now."""
        if self.started:
            return False
        self.started = True
        self.stream.write(json.dumps(self.about)[:-1] + ', "queries": [')
        return True

    def unread(self, path, reason, line=None):
        super().unread(path, reason, line)
        self.unreadable.append({"query": path, "reason": reason})

    def close(self):
        self._start()
        self.stream.write(f'\n], "unread": {json.dumps(self.unreadable)}}}\n')


class CsvOutput(_Output):
    """A header (`CSV_COLUMNS`), then one row per (query, rank); `metadata` as JSON,
    `matched` true/false (empty without a threshold), `rerank_score` empty without
    re-ranking."""

    def __init__(self, about, class_names, stream):
        super().__init__(about, class_names, stream)
        self.writer = csv.writer(stream, lineterminator="\n")
        self.writer.writerow(CSV_COLUMNS)

    def answer(self, query, matched, items):
        decision = "" if matched is None else str(matched).lower()
        for item in items:
            self.writer.writerow([query, item["rank"], item["id"], item["label"],
                                  _blank(item["class_name"]), item["similarity"],
                                  _blank(item["rerank_score"]), decision,
                                  json.dumps(item["metadata"])])


def _plain(value):
    """A NumPy id or label as the Python int or str JSON writes."""
    return value.item() if hasattr(value, "item") else value


def _number(value):
    """A float32 score as the shortest float that reads back as the same float32."""
    import numpy as np

    return float(str(np.float32(value)))


def _blank(value):
    return "" if value is None else value


def _name(item):
    """An item as text: its id where the id is text (a relative path, or a CSV column's
    value such as a SKU), else its image path (the metadata's `path`, or the metadata
    itself when it is a string), else `id N`."""
    if isinstance(item["id"], str):
        return item["id"]
    path = _path(item["metadata"])
    return f"id {item['id']!s:<8}" if path is None else path


def _path(metadata):
    """The image path an item's metadata holds, or None."""
    if isinstance(metadata, dict) and isinstance(metadata.get("path"), str):
        return metadata["path"]
    return metadata if isinstance(metadata, str) else None


def _fields(item):
    """`  key=value ...` of dict metadata, less the path where the item's name shows it."""
    metadata = item["metadata"]
    if not isinstance(metadata, dict):
        return ""
    shown = [f"{key}={json.dumps(value)}" for key, value in metadata.items()
             if key != "path" or value != _name(item)]
    return "  " + " ".join(shown) if shown else ""
