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
                       help="instead of searching images, print the recall@--k of the "
                       "index's search against an exact scan of its stored vectors, over N "
                       "sampled items (each one's k nearest other items)")


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


def measure_recall(args, open_index):
    """`keras-dml search INDEX|URI --measure-recall N [--k K] [--search-params ...]`:
    prints `Index.recall_vs_exact` of N stored items (sampled with a fixed seed, each
    searched with its own stored vector): the recall@K of the index's search against
    an exact scan of the same vectors. `open_index(location, collection, token,
    options)` opens the index (`keras_dml.cli.search.open_index`)."""
    import numpy as np

    if args.images:
        raise ValueError("--measure-recall searches the index's own items: give no "
                         f"IMAGE|DIR (got {args.images[0]!r}).")
    if args.measure_recall < 1:
        raise ValueError(f"--measure-recall must be at least 1, got {args.measure_recall}.")
    if args.k < 1:
        raise ValueError(f"--k must be at least 1, got {args.k}.")
    index = open_index(args.index, args.collection, args.token, search_options(args))
    try:
        vectors = index.embeddings
        if vectors is None:
            raise ValueError(f"{args.index} is empty: no item to measure the recall on.")
        k = min(args.k, len(vectors))
        chosen = np.random.default_rng(0).choice(len(vectors), min(args.measure_recall,
                                                                   len(vectors)), replace=False)
        recall = index.recall_vs_exact(vectors[chosen], k)
        options = index.options
    finally:
        index.close()
    kind = options.pop("index_type", index.backend)
    shown = ", ".join(f"{_milvus_name(kind, key)}={value}" for key, value in options.items())
    print(f"recall@{k} {recall:.4f}: {kind}{f' ({shown})' if shown else ''} against an exact "
          f"scan of the {len(vectors)} stored vectors, on {len(chosen)} sampled items "
          "searched with their own vectors")
    return 0


def _milvus_name(index_type, option):
    """Milvus' name of a keras_dml index option (`ef_search` -> `ef`), else the option."""
    from keras_dml.index.milvus import INDEX_TYPES

    return INDEX_TYPES.get(index_type, {}).get(option, (None, option))[1]
