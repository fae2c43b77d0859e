"""The approximate-index flags of `keras-dml index` and `keras-dml search`:
`--index-params` and `--search-params` in Milvus' names (HNSW: M, efConstruction, ef;
IVF_FLAT: nlist, nprobe), and `search --measure-recall N`, the recall@k of the index's
search against an exact scan of the same vectors."""

__all__ = ["add_index_arguments", "add_search_arguments", "index_options", "measure_recall",
           "search_options"]

_BUILD_HELP = "HNSW: M, efConstruction; IVF_FLAT: nlist"
_SEARCH_HELP = "HNSW: ef; IVF_FLAT: nprobe"


def add_index_arguments(group):
    """`--index-params` and `--search-params` for `keras-dml index --uri` (a new
    collection's, recorded with it; search parameters also change an existing one's)."""
    group.add_argument("--index-params", default=None, metavar="KEY=VALUE,...",
                       help=f"build parameters of --index-type ({_BUILD_HELP}), e.g. "
                       "M=32,efConstruction=200; recorded in the collection")
    group.add_argument("--search-params", default=None, metavar="KEY=VALUE,...",
                       help=f"search parameters recorded in the collection, used by every "
                       f"search of it ({_SEARCH_HELP}), e.g. ef=256")


def add_search_arguments(parser):
    """`--search-params` and `--measure-recall` for `keras-dml search`."""
    group = parser.add_argument_group("approximate index (Milvus HNSW or IVF_FLAT)")
    group.add_argument("--search-params", default=None, metavar="KEY=VALUE,...",
                       help=f"search parameters for this search ({_SEARCH_HELP}), e.g. "
                       "ef=256 (default: those the collection records)")
    group.add_argument("--measure-recall", type=int, default=None, metavar="N",
                       help="instead of printing results, print the recall@--k of the "
                       "index's search against an exact scan of its stored vectors, on N "
                       "query images sampled from the IMAGE|DIR given (else N of its own "
                       "items, each searched with its stored vector)")


def parse(text, flag):
    """`{"M": "32", ...}` of `"M=32,..."`; a ValueError names `flag` and a bad item."""
    params = {}
    for item in text.split(","):
        key, equals, value = (part.strip() for part in item.partition("="))
        if not key or not equals or not value:
            raise ValueError(f"{flag} takes KEY=VALUE pairs separated by commas, e.g. "
                             f"ef=256, got {item.strip()!r}.")
        if key in params:
            raise ValueError(f"{flag} gives {key} twice.")
        params[key] = value
    return params


def index_options(args):
    """The `Index` options of `keras-dml index --uri`: --index-type and the keras_dml
    options of --index-params and --search-params."""
    from keras_dml.index.milvus import from_milvus_names

    options = {} if args.index_type is None else {"index_type": args.index_type}
    for flag, stage in (("--index-params", "build"), ("--search-params", "search")):
        text = getattr(args, flag[2:].replace("-", "_"))
        if text is None:
            continue
        if args.index_type is None:
            raise ValueError(f"{flag} needs --index-type HNSW or IVF_FLAT (its keys depend "
                             "on it).")
        options.update(from_milvus_names(args.index_type, stage, parse(text, flag), flag))
    return options


def search_options(args):
    """The `Index.open` options of `keras-dml search --search-params` (the collection's
    index type read first: its keys depend on it); {} without the flag."""
    import os

    from keras_dml.index.milvus import DEFAULT_COLLECTION, from_milvus_names, read_record
    from keras_dml.index.storage import CONFIG

    if args.search_params is None:
        return {}
    if os.path.isfile(os.path.join(args.index, CONFIG)):
        raise ValueError(f"--search-params applies to a Milvus collection; {args.index} is a "
                         "saved index (its options are fixed by `keras-dml index --backend`).")
    record = read_record(args.index, args.collection or DEFAULT_COLLECTION, args.token)
    index_type = record["options"]["index_type"]
    return from_milvus_names(index_type, "search", parse(args.search_params,
                                                         "--search-params"),
                             "--search-params")


def measure_recall(args, open_index, index_run, query_files):
    """`keras-dml search INDEX|URI [IMAGE|DIR ...] --measure-recall N [--k K]
    [--search-params ...]`: prints `Index.recall_vs_exact`, the recall@K of the index's
    search against an exact scan of the same vectors, on N queries sampled with a fixed
    seed: image files of the IMAGE|DIR given (embedded by the index's run), else the
    index's own items (each searched with its stored vector). `open_index`, `index_run`
    and `query_files` are `keras_dml.cli.search`'s."""
    import numpy as np

    if args.measure_recall < 1:
        raise ValueError(f"--measure-recall must be at least 1, got {args.measure_recall}.")
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}.")
    index = open_index(args.index, args.collection, args.token, search_options(args))
    try:
        size = len(index)
        if not size:
            raise ValueError(f"{args.index} is empty: no item to measure the recall on.")
        queries, what = _recall_queries(args, index, np.random.default_rng(0), index_run,
                                        query_files)
        k = min(args.k, size)
        recall = index.recall_vs_exact(queries, k)
        options = index.options
    finally:
        index.close()
    kind = options.pop("index_type", index.backend)
    shown = ", ".join(f"{_milvus_name(kind, key)}={value}" for key, value in options.items())
    print(f"recall@{k} {recall:.4f}: {kind}{f' ({shown})' if shown else ''} against an exact "
          f"scan of the {size} stored vectors, on {len(queries)} {what}")
    return 0


def _recall_queries(args, index, rng, index_run, query_files):
    """`(queries, description)`: --measure-recall sampled query images embedded by
    the index's run, or sampled stored vectors when no IMAGE|DIR is given."""
    if not args.images:
        vectors = index.embeddings
        chosen = rng.choice(len(vectors), min(args.measure_recall, len(vectors)),
                            replace=False)
        return vectors[chosen], "sampled items searched with their own vectors"
    import numpy as np

    from keras_dml.index.runs import embed_chunks, load_run

    paths, problems = query_files(args.images)
    if problems:
        raise ValueError(problems[0])
    paths = [paths[i] for i in sorted(rng.choice(len(paths), min(args.measure_recall,
                                                                 len(paths)), replace=False))]
    run_dir = index_run(index, args.index, args.run)
    run = load_run(run_dir)
    index.check_model(run.embedder, allow_mismatch=args.allow_mismatch, run=run_dir)
    chunks = list(embed_chunks(run, paths, 256, skip_bad_images=True))
    queries = np.concatenate([chunk.embeddings for chunk in chunks])
    return queries, f"query images sampled from {', '.join(map(str, args.images))}"


def _milvus_name(index_type, option):
    """Milvus' name of a keras_dml index option (`ef_search` -> `ef`), else the option."""
    from keras_dml.index.milvus import INDEX_TYPES

    return INDEX_TYPES.get(index_type, {}).get(option, (None, option))[1]
