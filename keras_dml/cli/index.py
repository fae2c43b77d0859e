"""`keras-dml index`: a searchable index of a run's embeddings, saved or on Milvus."""

from keras_dml.cli.arguments import add_data_arguments, embedded

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `index` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "index", help="build and save a searchable index from a run's embedder",
        description="Embed a dataset split, or any folder or CSV list of images (--images), "
        "with a run's embedder and save a keras_dml.index.Index (NumPy + JSON) to search with "
        "`keras-dml search`. With --images the items' labels are the class folders (or CSV "
        "labels) and their metadata the image paths relative to the folder. With --uri the "
        "images go to a Milvus collection instead (a Milvus Lite file, or a server's "
        "http(s) URI), embedded and stored in chunks: memory stays bounded by --chunk-size, "
        "a killed run continues where it stopped when run again, and --update also removes "
        "the entries whose files are gone.")
    parser.add_argument("run", help="run directory (runs/<run>, holds model.keras)")
    add_data_arguments(parser)
    parser.add_argument("--output", default=None,
                        help="index directory (default: <run>/index)")
    parser.add_argument("--backend", default="exact",
                        help="exact (default), faiss_ivf or faiss_hnsw (the saved index)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing index directory")
    milvus = parser.add_argument_group("Milvus (pip install \"keras_dml[milvus]\")")
    milvus.add_argument("--uri", default=None, metavar="FILE.db|http(s)://HOST:PORT",
                        help="store the --images in this Milvus collection instead of a "
                        "directory: a Milvus Lite file (created if missing) or a server")
    milvus.add_argument("--token", default=None, help="Milvus server token (user:password)")
    milvus.add_argument("--collection", default=None,
                        help="collection name (default: the one keras_dml uses)")
    milvus.add_argument("--index-type", default=None, choices=("FLAT", "HNSW", "IVF_FLAT"),
                        help="Milvus index of a new collection: FLAT (exact, default), HNSW "
                        "or IVF_FLAT (approximate; see the guide 'Beyond one machine')")
    milvus.add_argument("--chunk-size", type=int, default=None,
                        help="images embedded and stored per step (default 2048): bounds "
                        "the memory")
    milvus.add_argument("--update", action="store_true",
                        help="also remove the entries whose files are gone")
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml index`: embeds the split or the images and saves the index; prints where."""
    import os

    if args.uri is not None:
        return run_milvus(args)
    for flag in ("token", "collection", "chunk_size"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} applies to a Milvus index: pass --uri.")
    if args.update:
        raise ValueError("--update applies to a Milvus index (--uri); a saved index is rebuilt "
                         "with --overwrite.")
    from keras_dml.index import Index
    from keras_dml.index.runs import load_run, run_provenance

    run = load_run(args.run)
    output = args.output or os.path.join(args.run, "index")
    if os.path.exists(output) and not args.overwrite:
        raise FileExistsError(f"{output} exists; pass --overwrite to replace it.")
    embeddings, labels, metadata, info = embedded(args, run)
    index = Index(backend=args.backend, info=info, provenance=run_provenance(run))
    index.add(embeddings, labels=labels, metadata=metadata)
    index.save(output, overwrite=args.overwrite)
    print(f"index: {output} ({len(index)} items, dimension {index.dim}, {args.backend})")
    return 0


def run_milvus(args):
    """`keras-dml index RUN --images DIR --uri URI`: the catalogue synced into Milvus."""
    import functools
    import os

    from keras_dml.index.catalogue import list_images
    from keras_dml.index.runs import embed_chunks, load_run
    from keras_dml.index.streaming import CHUNK_SIZE, sync
    from keras_dml.inference import Progress

    if args.images is None:
        raise ValueError("--uri stores image files: pass --images DIR|CSV.")
    refuse_saved_index_flags(args)
    chunk_size = CHUNK_SIZE if args.chunk_size is None else args.chunk_size
    if chunk_size < 1:
        raise ValueError(f"--chunk-size must be at least 1, got {chunk_size}.")
    run = load_run(args.run)
    catalogue = list_images(args.images)
    index = milvus_index(args, run, {"images": os.path.abspath(args.images),
                                     "root": catalogue.root})
    progress = Progress(None)
    try:
        chunks = functools.partial(embed_chunks, run, skip_bad_images=args.skip_bad_images,
                                   progress=progress)
        report = sync(index, catalogue, chunks, chunk_size, args.update, progress)
    finally:
        progress.close()
        index.close()  # a Lite file's serving process stops, and the file is free again
    where = args.uri + (f" (collection {args.collection})" if args.collection else "")
    gone = (f", removed {report.removed} whose files are gone" if report.removed else
            f"; {report.gone} entries' files are gone (--update removes them)" if report.gone
            else "")
    rate = f" ({progress.rate:.1f} images/s)" if report.added else ""
    total = report.added + report.kept + report.gone
    print(f"index: {where}: added {report.added} images{rate}, {report.kept} already there"
          f"{gone}; {total} items")
    if report.unreadable:
        print(f"keras-dml index: {len(report.unreadable)} files could not be read (above) and "
              "are not in the index (--skip-bad-images); fix them and run the same command "
              "again to add them.")
    return 0


def refuse_saved_index_flags(args):
    """--output, --overwrite and --backend are for a saved index; --overwrite names how a
    Milvus collection starts again."""
    from keras_dml.index.milvus import DEFAULT_COLLECTION

    if args.overwrite:
        name = args.collection or DEFAULT_COLLECTION
        raise ValueError(f"--overwrite is for a saved index (--output), not --uri: to start a "
                         f"Milvus collection again, drop it first (keras-dml collections "
                         f"{args.uri} drop {name} --yes) or index into a new --collection.")
    if args.output is not None or args.backend != "exact":
        raise ValueError("--output and --backend are for a saved index, not --uri.")


def milvus_index(args, run, info):
    """The collection at --uri: opened (refused if another model built it) or created."""
    from keras_dml.index import Index
    from keras_dml.index.runs import run_provenance

    from keras_dml.index.milvus import is_lite

    options = {} if args.index_type is None else {"index_type": args.index_type}
    options["lite_process"] = is_lite(args.uri)  # Lite's memory grows with the collection
    return Index("cosine", "milvus", info=info, uri=args.uri, token=args.token,
                 collection=args.collection, provenance=run_provenance(run), **options)
