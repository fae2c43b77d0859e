"""`keras-dml index`: a searchable index of a run's embeddings, saved or on Milvus."""

from keras_dml.cli.arguments import (
    add_data_arguments,
    add_run_or_backbone,
    embedded_items,
    load_run_or_backbone,
)

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `index` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "index", help="build and save a searchable index from a run's embedder",
        description="Embed a dataset split, or any folder or CSV list of images (--images), "
        "with a run's embedder and save a keras_dml.index.Index (NumPy + JSON) to search with "
        "`keras-dml search`. With --images the items' labels are the class folders (or CSV "
        "labels) and their metadata the image path relative to the folder (field \"path\") "
        "and a CSV's other columns, typed (see --id-column). With --uri the "
        "images go to a Milvus collection instead (a Milvus Lite file, or a server's "
        "http(s) URI), embedded and stored in chunks: memory stays bounded by --chunk-size, "
        "a killed run continues where it stopped when run again, and --update also removes "
        "the entries whose files are gone.")
    add_run_or_backbone(parser, "run directory (runs/<run>, holds model.keras)")
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
    from keras_dml.cli.approximate import add_index_arguments

    add_index_arguments(milvus)
    milvus.add_argument("--chunk-size", type=int, default=None,
                        help="images embedded and stored per step (default 2048): bounds "
                        "the memory")
    milvus.add_argument("--update", action="store_true",
                        help="also remove the entries whose files are gone (at most "
                        "--max-removals of them)")
    _add_sync_arguments(parser)
    add_id_arguments(parser)
    parser.set_defaults(handler=run)


def _add_sync_arguments(parser):
    """The safety flags of a catalogue synced into Milvus (`keras_dml.index.streaming.sync`)."""
    from keras_dml.index.safeguards import MAX_REMOVALS

    group = parser.add_argument_group("catalogue safety (--uri)")
    group.add_argument("--dry-run", action="store_true",
                       help="print what the command would add and remove (counts and the "
                       "first ids) and change nothing")
    group.add_argument("--max-removals", default=MAX_REMOVALS, metavar="N|P%",
                       type=_max_removals,
                       help="the most items --update may remove: a count, or a percentage "
                       "of the items (rounded up); more is refused and nothing changes "
                       f"(default {MAX_REMOVALS.replace('%', '%%')}; 100%% allows any)")
    group.add_argument("--move-root", action="store_true",
                       help="the catalogue folder moved: record the new folder as the "
                       "collection's root (the ids, paths relative to it, are kept; refused "
                       "when more than --max-removals of them are not found there)")


def _max_removals(text):
    import argparse

    from keras_dml.index.safeguards import parse_max_removals

    try:
        return parse_max_removals(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a count (e.g. 50) or a percentage (e.g. 10%)") from None


def add_id_arguments(parser):
    """Adds --id-column: product ids from a column of the --images CSV."""
    parser.add_argument(
        "--id-column", default=None, metavar="COLUMN",
        help="with a CSV --images: the column whose values (text) are the items' ids, e.g. "
        "sku, instead of the image paths; refused if a value is empty or on two rows. The "
        "columns other than path, label, split and this one are the items' metadata: "
        "integers, decimals or text by column, empty cells null")


def run(args):
    """`keras-dml index`: embeds the split or the images and saves the index; prints where."""
    import os

    if args.uri is not None:
        return run_milvus(args)
    for flag in ("token", "collection", "chunk_size", "index_type", "index_params",
                 "search_params"):
        if getattr(args, flag) is not None:
            raise ValueError(f"--{flag.replace('_', '-')} applies to a Milvus index: pass --uri.")
    for flag in ("dry_run", "move_root"):
        if getattr(args, flag):
            raise ValueError(f"--{flag.replace('_', '-')} applies to a Milvus index: pass --uri.")
    if args.update:
        raise ValueError("--update applies to a Milvus index (--uri); a saved index is rebuilt "
                         "with --overwrite.")
    from keras_dml.index import Index
    from keras_dml.index.runs import run_provenance

    if args.backbone is not None and args.output is None:
        raise ValueError("--backbone: pass --output DIR for the index (there is no run "
                         "folder to keep it in).")
    run = load_run_or_backbone(args)
    output = args.output or os.path.join(args.run, "index")
    if os.path.exists(output) and not args.overwrite:
        raise FileExistsError(f"{output} exists; pass --overwrite to replace it.")
    embeddings, labels, ids, metadata, info = embedded_items(args, run)
    index = Index(backend=args.backend, info=info, provenance=run_provenance(run))
    index.add(embeddings, labels=labels, ids=ids, metadata=metadata)
    index.save(output, overwrite=args.overwrite)
    print(f"index: {output} ({len(index)} items, dimension {index.dim}, {args.backend})")
    return 0


def run_milvus(args):
    """`keras-dml index RUN --images DIR --uri URI`: the catalogue synced into Milvus."""
    import functools
    import os

    from keras_dml.index.catalogue import list_images
    from keras_dml.index.milvus import DEFAULT_COLLECTION
    from keras_dml.index.records import check_metadata_fields
    from keras_dml.index.runs import embed_chunks
    from keras_dml.index.safeguards import new_removals_file
    from keras_dml.index.streaming import CHUNK_SIZE, sync
    from keras_dml.inference import Progress

    if args.images is None:
        raise ValueError("--uri stores image files: pass --images DIR|CSV.")
    refuse_saved_index_flags(args)
    chunk_size = CHUNK_SIZE if args.chunk_size is None else args.chunk_size
    if chunk_size < 1:
        raise ValueError(f"--chunk-size must be at least 1, got {chunk_size}.")
    run = load_run_or_backbone(args)
    catalogue = list_images(args.images, args.id_column)
    if args.dry_run and _no_lite_file(args.uri):
        return _print_dry_run(args, _everything_new(catalogue))
    index = milvus_index(args, run, None)  # the record changes only once sync has checked
    removals = new_removals_file(os.path.join(run.run_dir or os.curdir, "index_removals"),
                                 args.collection or DEFAULT_COLLECTION)
    progress = Progress(None)
    try:  # the catalogue's columns against the collection's fields, before any embedding
        check_metadata_fields({"metadata_fields": index.metadata_fields}, catalogue.metadata)
        chunks = functools.partial(embed_chunks, run, skip_bad_images=args.skip_bad_images,
                                   progress=progress)
        report = sync(index, catalogue, chunks, chunk_size, args.update, progress,
                      dry_run=args.dry_run, max_removals=args.max_removals,
                      move_root=args.move_root, removals_file=removals)
        if not args.dry_run:
            index.info = {**index.info, "images": os.path.abspath(args.images)}
            if report.added or report.removed:
                index.flush()  # searches of the new rows take Milvus' fast path
    finally:
        progress.close()
        index.close()  # a Lite file's serving process stops, and the file is free again
    if args.dry_run:
        return _print_dry_run(args, report)
    _print_report(args, report, progress)
    return 0


def _print_report(args, report, progress):
    where = args.uri + (f" (collection {args.collection})" if args.collection else "")
    gone = (f", removed {report.removed} whose files are gone" if report.removed else
            f"; {report.gone} entries' files are gone (--update removes them)" if report.gone
            else "")
    rate = f" ({progress.rate:.1f} images/s)" if report.added else ""
    total = report.added + report.kept + report.gone
    print(f"index: {where}: added {report.added} images{rate}, {report.kept} already there"
          f"{gone}; {total} items")
    if report.removals_file:
        print(f"index: the removed items are listed in {report.removals_file} (one JSON "
              "line each: id, label, metadata, path), to put them back")
    if report.unreadable:
        print(f"keras-dml index: {len(report.unreadable)} files could not be read (above) and "
              "are not in the index (--skip-bad-images); fix them and run the same command "
              "again to add them.")


#: Ids a dry run prints of what it would add, and of what it would remove.
SHOWN_IDS = 10


def _print_dry_run(args, report):
    """What the command would do; nothing was changed."""
    where = args.uri + (f" (collection {args.collection})" if args.collection else "")
    gone = (f", would remove {len(report.to_remove)} whose files are gone" if report.to_remove
            else f"; {report.gone} entries' files are gone (--update would remove them)"
            if report.gone else "")
    print(f"index (dry run): {where}: would add {len(report.to_add)} images, {report.kept} "
          f"already there{gone}; nothing was changed")
    for verb, ids in (("add", report.to_add), ("remove", report.to_remove)):
        if ids:
            more = f" (and {len(ids) - SHOWN_IDS} more)" if len(ids) > SHOWN_IDS else ""
            print(f"  would {verb}: {', '.join(ids[:SHOWN_IDS])}{more}")
    if report.refusal:
        from keras_dml.cli.parser import build_parser, flag_words

        refusal = flag_words(report.refusal, build_parser().command_parsers["index"])
        print(f"  without --dry-run the command is refused: {refusal}")
    return 0


def _no_lite_file(uri):
    import os

    from keras_dml.index.milvus import is_lite

    return is_lite(uri) and not os.path.exists(os.fspath(uri))


def _everything_new(catalogue):
    from keras_dml.index.streaming import SyncReport

    return SyncReport(to_add=list(catalogue.ids), dry_run=True)


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

    from keras_dml.cli.approximate import index_options

    options = index_options(args)
    options["lite_process"] = is_lite(args.uri)  # Lite's memory grows with the collection
    return Index("cosine", "milvus", info=info, uri=args.uri, token=args.token,
                 collection=args.collection, provenance=run_provenance(run), **options)
