"""`keras-dml search`: the top-k index items of image files (or of folders of them)."""

import argparse
import json
import sys

from keras_dml.cli import approximate
from keras_dml.cli.arguments import capped_k

__all__ = ["add_command", "run"]

CHUNK = 256  # query images decoded, embedded and answered at a time
EPILOG = """\
--filter EXPR: conditions joined with "and":
  FIELD OP VALUE          OP: == != < <= > >=
  FIELD in [V, ...]       FIELD not in [V, ...]
  FIELD: label, id, added (the time the item was added: compare with an ISO date or
  time, "2026-11-01" or "2026-11-01T08:30:00+01:00", UTC when no zone is given),
  metadata (the whole value) or a metadata field (price; `list price` for a name
  with spaces or signs). VALUE: a number, a "quoted" or 'quoted' string, true,
  false. An item without the field, or with a value of another type, does not
  pass. An unknown field, a label or id of another type than the index's, and a
  syntax error are refused in one line. --label L adds label in [L, ...].
  e.g. --filter 'label == "sku-1" and price < 20 and added > "2026-11-01"'

Output: each result's score is its similarity (cosine, inner product or minus
the squared distance), also with --rerank; a re-ranked result shows the
re-ranker's score in its own column (text: "rerank"). With --threshold the
match is the first result's label when its similarity reaches the threshold.
  --format json: one document {index, collection (Milvus; null for a saved
    index), model_fingerprint, run, metric, k, threshold, rerank, filter, labels,
    queries: [{query, matched (true/false; null without --threshold), results:
    [{rank, id, label, class_name, similarity, rerank_score, metadata}]}],
    unread: [{query, reason}]}
  --format csv: one row per query and rank, columns query, rank, id, label,
    class_name, similarity, rerank_score, matched, metadata (as JSON)
  Queries print as given: a file as named, a folder's images under the folder
  as named.
"""


def add_command(commands):
    """Adds `search` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "search", help="print the top-k index items of image files",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Embed image files (or every image of a folder) with the index's run "
        "embedder and print the k most similar items (their image path when the index holds "
        "one, else their id; label; score: the similarity), and with --threshold the match "
        "decision. A file that cannot be read is reported in one line and the others "
        "answered. The run is the one the index records, and its model must be the one that "
        "built the index.", epilog=EPILOG)
    parser.add_argument("index", metavar="INDEX|URI",
                        help="index directory written by `keras-dml index`, or the Milvus "
                        "URI it wrote to with --uri (a Milvus Lite folder, or http(s)://...)")
    parser.add_argument("images", nargs="*", metavar="IMAGE|DIR",
                        help="image files (PNG, JPEG, ...) or folders of them")
    parser.add_argument("--k", type=int, default=5,
                        help="items per query, default 5 (at most the index's size: a larger "
                        "--k prints every item, with a note)")
    parser.add_argument("--threshold", default=None,
                        help="similarity threshold for match/unknown, or 'calibrated' "
                        "(the run's calibration.json)")
    parser.add_argument("--rerank", default=None, metavar="METHOD[:k=v,...]",
                        help="re-rank the top candidates: qe, dba or k_reciprocal, with "
                        "options as qe:n=2,alpha=3 (keras_dml.index.rerank)")
    parser.add_argument("--label", action="append", default=None,
                        help="search only the items of this label (repeat for several)")
    _add_filter_and_format(parser)
    parser.add_argument("--collection", default=None,
                        help="Milvus collection or alias (default: the one keras_dml uses)")
    parser.add_argument("--token", default=None, help="Milvus server token")
    parser.add_argument("--run", default=None,
                        help="the run that built the index, where it is now (default: the "
                        "path the index records; use this after moving the run)")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="search even when the run's model is not the one that built the "
                        "index (a loud warning instead of an error)")
    approximate.add_search_arguments(parser)
    parser.set_defaults(handler=run)


def _add_filter_and_format(parser):
    from keras_dml.cli.search_output import FORMATS

    parser.add_argument("--filter", default=None, metavar="EXPR",
                        help="search only the items passing EXPR, on label, id, added (the "
                        "time an item was added) and metadata fields, e.g. 'label == \"sku-1\" "
                        "and price < 20 and added > \"2026-11-01\"' (the syntax below)")
    parser.add_argument("--format", choices=FORMATS, default="text",
                        help="text (default), json (one document) or csv (one row per query "
                        "and rank): the fields below")


def run(args):
    """`keras-dml search`: prints the top-k of each image (and the match decision).

    Returns 1 when some query files could not be read (the others are answered),
    else 0.
    """
    from keras_dml.cli.search_output import make_output
    from keras_dml.index.runs import embed_chunks
    from keras_dml.inference import Progress

    search_filter = _search_filter(args.filter, args.label)  # a bad expression: before all
    if args.measure_recall is not None:
        return approximate.measure_recall(args, open_index, index_run, query_files)
    if not args.images:
        raise ValueError("give the image files or folders to search (IMAGE|DIR), or "
                         "--measure-recall N.")
    index = open_index(args.index, args.collection, args.token,
                       approximate.search_options(args))
    run_dir = index_run(index, args.index, args.run)
    run = _load_run(run_dir, args.index, args.run)
    index.check_model(run.embedder, allow_mismatch=args.allow_mismatch, run=run_dir)
    threshold = _threshold(args.threshold, run_dir)
    size = len(index)  # one count per command, not per query chunk
    if not size:
        raise ValueError(f"{args.index} is empty: nothing to search.")
    k = capped_k(args.k, size, "search")
    _check_filter(index, search_filter, args)
    paths, unlisted = query_files(args.images)
    output = make_output(args.format, _about(args, index, run_dir, k, threshold),
                         index.info.get("class_names"))
    for argument, problem in unlisted:
        output.unread(argument, problem, line=problem)
    progress = Progress(len(paths))
    unread = 0
    # each query is answered on its own: a bad file is skipped, named, and counted
    for chunk in embed_chunks(run, paths, CHUNK, skip_bad_images=True, progress=progress):
        for path, reason in chunk.skipped:
            output.unread(path, reason)
        unread += len(chunk.skipped)
        if not len(chunk):
            continue
        result = index.search(chunk.embeddings, k, filter=search_filter, rerank=args.rerank)
        output.write(chunk.paths, result)
    progress.close()
    output.close()
    failed = len(unlisted) + unread
    if failed:
        print(f"keras-dml search: {failed} of {len(unlisted) + len(paths)} queries could not "
              f"be read (above); the other {len(paths) - unread} are answered.",
              file=sys.stderr)
    return 1 if failed else 0


def _search_filter(expression, labels):
    """The dict filter of --filter and --label (None without either)."""
    from keras_dml.index.filter_expression import parse_expression

    search_filter = {}
    if expression is not None:
        try:
            search_filter = parse_expression(expression)
        except ValueError as error:
            raise ValueError(f"--filter {expression!r}: {error}") from None
    if labels:
        if "in" in search_filter.get("label", {}):
            raise ValueError("Give the labels to search in --label or in --filter's "
                             "'label in [...]', not both.")
        search_filter.setdefault("label", {})["in"] = list(labels)
    return search_filter or None


def _check_filter(index, search_filter, args):
    """Refuses, before any query is embedded, a filter that names an unknown field or
    a value of the wrong kind (the index's one-line error), or that no item passes:
    one search of a probe vector (the items a filter passes do not depend on the query)."""
    import numpy as np

    if search_filter is not None and not index.search(
            np.ones((1, index.dim), np.float32), 1, filter=search_filter).ids.shape[1]:
        raise ValueError(_nothing_passes(args))


def _nothing_passes(args):
    """The error of a --filter / --label that no item passes."""
    labels = f"--label {' or '.join(args.label)}" if args.label else ""
    if args.filter is None:
        return f"No item in {args.index} has {labels}: nothing to search."
    labels = f" and {labels}" if labels else ""
    return (f"No item in {args.index} passes --filter {args.filter!r}{labels}: nothing to "
            "search.")


def _about(args, index, run_dir, k, threshold):
    """What answers the search and how: the JSON document's head."""
    from keras_dml.index.milvus import DEFAULT_COLLECTION

    milvus = index.backend == "milvus"
    return {"index": args.index,
            "collection": (args.collection or DEFAULT_COLLECTION) if milvus else None,
            "model_fingerprint": index.provenance.get("model_fingerprint"),
            "run": str(run_dir), "metric": index.metric, "k": k, "threshold": threshold,
            "rerank": args.rerank, "filter": args.filter, "labels": args.label}


def open_index(location, collection=None, token=None, options=None):
    """A saved index directory (`Index.load`), else the Milvus collection at the URI
    (with the search `options` of `Index.open`, if any)."""
    import os

    from keras_dml.index import Index
    from keras_dml.index.storage import CONFIG

    if os.path.isfile(os.path.join(location, CONFIG)):
        if collection is not None or token is not None:
            raise ValueError(f"{location} is a saved index: --collection and --token are for "
                             "Milvus.")
        return Index.load(location)
    if not location.startswith(("http://", "https://")) and not os.path.isdir(location):
        raise FileNotFoundError(f"{location} does not exist: give an index directory or a "
                                "Milvus URI written by `keras-dml index`.")
    return Index.open(location, collection, token, **(options or {}))


def index_run(index, location, run_dir=None):
    """The run directory to embed queries with: `run_dir` (--run) or the one the
    index records.

    Raises:
        ValueError: The index records no run and none is given.
    """
    recorded = index.provenance.get("run") or index.info.get("run")
    if run_dir is None and recorded is None:
        raise ValueError(f"{location} records no run to embed images with: pass --run RUN, "
                         "or build it with `keras-dml index RUN`.")
    return run_dir or recorded


def _load_run(run_dir, location, given):
    """`load_run(run_dir)`; a missing recorded run says the index points there."""
    import os

    from keras_dml.backbone_families import pretrained_name
    from keras_dml.index.runs import load_run

    if given is None and not pretrained_name(run_dir) and not os.path.isfile(
            os.path.join(run_dir, "model.keras")):
        raise FileNotFoundError(
            f"{location} points to the run {run_dir}, which holds no model.keras (moved or "
            "deleted?): pass --run with the run's new folder.")
    return load_run(run_dir)


def query_files(arguments):
    """`(paths, problems)`: the image files named, each folder's images (as
    `keras-dml index --images` lists them, sorted), and `(argument, message)`
    per argument that is neither a file nor a folder of images.

    Every path is written as the user gave it: a file as named, a folder's
    image as the folder's argument joined with the image's path inside it.
    """
    import os

    from keras_dml.index.catalogue import list_images

    paths, problems = [], []
    for argument in arguments:
        if os.path.isdir(argument):
            try:
                paths.extend(os.path.join(argument, inside)
                             for inside in list_images(argument).ids)
            except ValueError as error:
                problems.append((argument, str(error)))
        elif os.path.isfile(argument):
            paths.append(argument)
        else:
            problems.append((argument, f"No image file or folder at {argument!r}."))
    return paths, problems


def _threshold(value, run_dir):
    import os

    if value is None:
        return None
    if value == "calibrated":
        path = os.path.join(run_dir, "calibration", "calibration.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path} does not exist: run `keras-dml calibrate` first.")
        with open(path) as f:
            return float(json.load(f)["threshold"])
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"--threshold must be a number or 'calibrated', got {value!r}.") from None
