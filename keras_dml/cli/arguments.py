"""Arguments and steps shared by several `keras-dml` commands (index, calibrate, embed)."""


def add_data_arguments(parser):
    """Adds --images, --dataset, --split and --data-dir: the images a command embeds."""
    parser.add_argument("--images", default=None, metavar="DIR|CSV",
                        help="a folder of images (root/<class>/<image>) or a CSV list "
                        "(path,label), instead of a dataset split")
    parser.add_argument("--dataset", default=None,
                        help="dataset name (default: the run's training dataset)")
    parser.add_argument("--split", default="test",
                        help="test (default: held-out classes), train, query or gallery")
    parser.add_argument("--data-dir", default=None, help="local dataset folder")


def embedded(args, run):
    """`(embeddings, labels, metadata, info)` of --images or of the dataset split."""
    import os

    from keras_dml.index.catalogue import list_images
    from keras_dml.index.embedding import embed_batches
    from keras_dml.index.progress import Progress
    from keras_dml.index.runs import batches_of, load_split

    info = {"run": os.path.abspath(run.run_dir)}
    if args.images is not None:
        if args.dataset is not None or args.data_dir is not None:
            raise ValueError("Pass either --images or --dataset/--data-dir, not both.")
        catalogue = list_images(args.images)
        embeddings = embed_catalogue(run, catalogue)
        info.update(images=os.path.abspath(args.images), root=catalogue.root)
        labels = catalogue.labels if catalogue.labelled else None
        return embeddings, labels, catalogue.ids, info
    split = load_split(run, args.dataset, args.split, args.data_dir)
    batches, class_names = batches_of(run, split)
    embeddings, labels = embed_batches(run.embedder, batches, progress=Progress(len(split)))
    info.update(dataset=args.dataset or run.dataset, split=args.split,
                class_names=class_names)
    return embeddings, labels, None, info


def embed_catalogue(run, catalogue, batch_size=64):
    """The catalogue's embeddings, then the line "embedded N images in S s (X images/s)"."""
    import time

    from keras_dml.index.catalogue import embed_files
    from keras_dml.index.runs import preprocessing

    started = time.perf_counter()
    embeddings = embed_files(run.embedder, catalogue.paths, preprocessing(run), batch_size)
    seconds = time.perf_counter() - started
    print(f"embedded {len(embeddings)} images in {seconds:.1f} s "
          f"({len(embeddings) / seconds:.1f} images/s)")
    return embeddings


def capped_k(k, size, command, items="items in the index"):
    """`min(k, size)`, with a note on stderr when `--k` is capped (the command line prints
    every item with a note where Python's `Index.search` and `export_retriever` refuse).

    Raises:
        ValueError: `k` is below 1.
    """
    import sys

    if k < 1:
        raise ValueError(f"--k must be at least 1, got {k}.")
    if k > size:
        print(f"keras-dml {command}: note: --k {k} is more than the {size} {items}: "
              f"using k={size}.", file=sys.stderr)
    return min(k, size)
