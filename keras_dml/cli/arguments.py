"""Arguments and steps shared by several `keras-dml` commands (index, calibrate, embed)."""

__all__ = ["add_data_arguments", "add_run_or_backbone", "add_skip_argument", "capped_k",
           "embed_catalogue", "embedded", "embedded_items", "kept", "load_run_or_backbone",
           "report_skipped"]


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
    add_skip_argument(parser)


def add_run_or_backbone(parser, run_help):
    """Adds the RUN positional and --backbone NAME, the zero-shot alternative to a run
    (load the chosen one with `load_run_or_backbone`)."""
    parser.add_argument("run", nargs="?", default=None, help=run_help)
    parser.add_argument("--backbone", default=None, metavar="NAME",
                        help="instead of a run: a pretrained backbone without training, "
                        "its L2-normalised pooled features as the embedding (the zero-shot "
                        "baseline): hub:PRESET (a KerasHub preset name, hf://..., "
                        "kaggle://... or a local preset folder) or a Keras Applications "
                        "name (ResNet50, MobileNetV3Small, ...: ImageNet weights from "
                        "Keras' cache ~/.keras/models, or downloaded)")


def load_run_or_backbone(args):
    """The `keras_dml.index.runs.Run` of RUN or of --backbone, exactly one of them given.

    Raises:
        ValueError: Both or neither given, or a --backbone without pretrained weights.
    """
    from keras_dml.backbone_families import FAMILIES, pretrained_name
    from keras_dml.index.runs import backbone_run, load_run

    if (args.run is None) == (args.backbone is None):
        raise ValueError("Pass a run folder (RUN) or --backbone NAME, not "
                         f"{'both' if args.run else 'neither'}.")
    if args.backbone is None:
        return load_run(args.run)
    if pretrained_name(args.backbone) is None:
        raise ValueError(f"--backbone takes a pretrained backbone, hub:PRESET or one of "
                         f"{', '.join(FAMILIES)}; got {args.backbone!r} (a trained model is "
                         "given as RUN).")
    return backbone_run(args.backbone)


def add_skip_argument(parser):
    """Adds --skip-bad-images: the one bad-image rule of every command that embeds."""
    parser.add_argument("--skip-bad-images", action="store_true",
                        help="leave out image files that cannot be read or decoded (each "
                        "named, then listed) instead of stopping at the first")


def embedded(args, run):
    """`(embeddings, labels, metadata, info)` of --images or of the dataset split."""
    embeddings, labels, _, metadata, info = embedded_items(args, run)
    return embeddings, labels, metadata, info


def embedded_items(args, run):
    """`(embeddings, labels, ids, metadata, info)` of --images or of the dataset split:
    ids from --id-column where the command has it, else None (running numbers); the
    metadata of --images as `keras_dml.index.catalogue.list_images` lists it."""
    import os

    from keras_dml.index.catalogue import RELATIVE_PATH, list_images
    from keras_dml.index.runs import embed_split, load_split
    from keras_dml.index.safeguards import layout_of

    info = {"run": run.source}
    if args.images is not None:
        if args.dataset is not None or args.data_dir is not None:
            raise ValueError("Pass either --images or --dataset/--data-dir, not both.")
        catalogue = list_images(args.images, getattr(args, "id_column", None))
        result = embed_catalogue(run, catalogue, skip_bad_images=args.skip_bad_images)
        info.update(images=os.path.abspath(args.images), catalogue=layout_of(catalogue))
        labels = result.labels if catalogue.labelled else None
        ids = None if catalogue.id_layout == RELATIVE_PATH else kept(catalogue.ids, result)
        return result.embeddings, labels, ids, kept(catalogue.metadata, result), info
    if getattr(args, "id_column", None) is not None:
        raise ValueError("--id-column names a column of the --images CSV; pass --images.")
    split = load_split(run, args.dataset, args.split, args.data_dir)
    result = embed_split(run, split, skip_bad_images=args.skip_bad_images)
    report_skipped(result.skipped)
    info.update(dataset=args.dataset or run.dataset, split=args.split,
                class_names=[str(name) for name in split.class_names])
    return result.embeddings, result.labels, None, None, info


def embed_catalogue(run, catalogue, batch_size=64, skip_bad_images=False):
    """The `keras_dml.inference.Embedded` of the catalogue's files (labels: its class
    names), then the line "embedded N images in S s (X images/s)" and the files left
    out (`skip_bad_images`)."""
    import time

    from keras_dml.index.runs import embed_files

    started = time.perf_counter()
    result = embed_files(run, catalogue.paths, catalogue.labels, batch_size, skip_bad_images)
    seconds = time.perf_counter() - started
    print(f"embedded {len(result)} images in {seconds:.1f} s "
          f"({len(result) / seconds:.1f} images/s)")
    report_skipped(result.skipped)
    return result


def kept(values, embedded):
    """The items of `values` (one per input) that `embedded` holds, in its order."""
    return [values[i] for i in embedded.positions]


def report_skipped(skipped):
    """A closing count on stderr, then one line per file `--skip-bad-images` left out
    (`skipped`: `[(path, reason)]`)."""
    import sys

    from keras_dml.data.image_errors import skipped_sentence

    if skipped:
        print(f"left out {len(skipped)} unreadable image file(s) (--skip-bad-images):",
              file=sys.stderr)
        for path, reason in skipped:
            print(f"  {skipped_sentence(path, reason)}", file=sys.stderr)


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
