"""`keras-dml search`: the top-k index items of image files (or of folders of them)."""

import json
import sys

from keras_dml.cli import approximate
from keras_dml.cli.arguments import capped_k

__all__ = ["add_command", "run"]

CHUNK = 256  # query images decoded, embedded and answered at a time


def add_command(commands):
    """Adds `search` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "search", help="print the top-k index items of image files",
        description="Embed image files (or every image of a folder) with the index's run "
        "embedder and print the k most similar items (their image path when the index holds "
        "one, else their id; label; score), and with --threshold the match decision. A file "
        "that cannot be read is reported in one line and the others answered. The run is "
        "the one the index records, and its model must be the one that built the index.")
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
    parser.add_argument("--collection", default=None,
                        help="Milvus collection (default: the one keras_dml uses)")
    parser.add_argument("--token", default=None, help="Milvus server token")
    parser.add_argument("--run", default=None,
                        help="the run that built the index, where it is now (default: the "
                        "path the index records; use this after moving the run)")
    parser.add_argument("--allow-mismatch", action="store_true",
                        help="search even when the run's model is not the one that built the "
                        "index (a loud warning instead of an error)")
    approximate.add_search_arguments(parser)
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml search`: prints the top-k of each image (and the match decision).

    Returns 1 when some query files could not be read (the others are answered),
    else 0.
    """
    from keras_dml.index.runs import embed_chunks
    from keras_dml.inference import Progress

    if args.measure_recall is not None:
        return approximate.measure_recall(args, open_index, index_run, query_files)
    if not args.images:
        raise ValueError("give the image files or folders to search (IMAGE|DIR), or "
                         "--measure-recall N.")
    index = open_index(args.index, args.collection, args.token,
                       approximate.search_options(args))
    search_filter = {"label": args.label} if args.label else None
    run_dir = index_run(index, args.index, args.run)
    run = _load_run(run_dir, args.index, args.run)
    index.check_model(run.embedder, allow_mismatch=args.allow_mismatch, run=run_dir)
    threshold = _threshold(args.threshold, run_dir)
    size = len(index)  # one count per command, not per query chunk
    if not size:
        raise ValueError(f"{args.index} is empty: nothing to search.")
    k = capped_k(args.k, size, "search")
    paths, unlisted = query_files(args.images)
    for problem in unlisted:
        print(f"keras-dml search: error: {problem}", file=sys.stderr)
    progress = Progress(len(paths))
    named = _class_namer(index.info.get("class_names"))
    unread = 0
    # each query is answered on its own: a bad file is skipped, named, and counted
    for chunk in embed_chunks(run, paths, CHUNK, skip_bad_images=True, progress=progress):
        for path, reason in chunk.skipped:
            print(f"keras-dml search: error: {path} ({reason})", file=sys.stderr)
        unread += len(chunk.skipped)
        if not len(chunk):
            continue
        queries, kept = chunk.embeddings, chunk.paths
        result = index.search(queries, k, filter=search_filter, rerank=args.rerank)
        if search_filter and not result.ids.shape[1]:
            raise ValueError(f"No item in {args.index} has --label "
                             f"{' or '.join(args.label)}: nothing to search.")
        matches = None if threshold is None else index.match(queries, threshold)
        _print(kept, result, matches, named)
    progress.close()
    failed = len(unlisted) + unread
    if failed:
        print(f"keras-dml search: {failed} of {len(unlisted) + len(paths)} queries could not "
              f"be read (above); the other {len(paths) - unread} are answered.",
              file=sys.stderr)
    return 1 if failed else 0


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

    from keras_dml.index.runs import load_run

    if given is None and not os.path.isfile(os.path.join(run_dir, "model.keras")):
        raise FileNotFoundError(
            f"{location} points to the run {run_dir}, which holds no model.keras (moved or "
            "deleted?): pass --run with the run's new folder.")
    return load_run(run_dir)


def query_files(arguments):
    """`(paths, problems)`: the image files named, each folder's images (as
    `keras-dml index --images` lists them, sorted), and one line per argument
    that is neither a file nor a folder of images."""
    import os

    from keras_dml.index.catalogue import list_images

    paths, problems = [], []
    for argument in arguments:
        if os.path.isdir(argument):
            try:
                paths.extend(list_images(argument).paths)
            except ValueError as error:
                problems.append(str(error))
        elif os.path.isfile(argument):
            paths.append(argument)
        else:
            problems.append(f"No image file or folder at {argument!r}.")
    return paths, problems


def _print(paths, result, matches, named):
    for row, path in enumerate(paths):
        decision = "" if matches is None else f"  match: {named(matches[row])}"
        print(f"{path}{decision}")
        for rank in range(len(result.metadata[row])):
            item = result.metadata[row][rank]
            item = f"id {result.ids[row, rank]:<8}" if item is None else str(item)
            print(f"  {rank + 1:>2}. {item}  label {named(result.labels[row, rank]):<10} "
                  f"score {result.scores[row, rank]:.4f}")


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


def _class_namer(class_names):
    """`label -> "label (class name)"` when the index records its split's class names."""
    import numpy as np

    def named(label):
        if class_names and isinstance(label, (int, np.integer)) and 0 <= label < len(
                class_names):
            return f"{label} ({class_names[label]})"
        return str(label) if str(label) else "-"

    return named
