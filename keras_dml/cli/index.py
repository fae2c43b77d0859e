"""`keras-dml index`: a searchable index of a run's embeddings."""

from keras_dml.cli.arguments import add_data_arguments, embedded


def add_command(commands):
    """Adds `index` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "index", help="build and save a searchable index from a run's embedder",
        description="Embed a dataset split, or any folder or CSV list of images (--images), "
        "with a run's embedder and save a keras_dml.index.Index (NumPy + JSON) to search with "
        "`keras-dml search`. With --images the items' labels are the class folders (or CSV "
        "labels) and their metadata the image paths relative to the folder.")
    parser.add_argument("run", help="run directory (runs/<run>, holds model.keras)")
    add_data_arguments(parser)
    parser.add_argument("--output", default=None,
                        help="index directory (default: <run>/index)")
    parser.add_argument("--backend", default="exact",
                        help="exact (default), faiss_ivf or faiss_hnsw")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing index directory")
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml index`: embeds the split or the images and saves the index; prints where."""
    import os

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
