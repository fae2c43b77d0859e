"""`keras-dml embed`: a folder or CSV list of images as a .npz of embeddings."""

from keras_dml.cli.arguments import add_skip_argument, embed_catalogue, kept

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `embed` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "embed", help="embed a folder or CSV list of images with a run's embedder",
        description="Embed every image of a folder (recursively: root/<class>/<image>, "
        "images directly in the folder without a class) or of a CSV list (path,label) with "
        "a run's embedder and preprocessing, into a .npz that NumPy reads without keras_dml: "
        "embeddings (n, d) float32, ids (paths relative to the folder, or as the CSV lists "
        "them) and labels (class names; '' outside a class folder) when there are any.")
    parser.add_argument("run", help="run directory (runs/<run>, holds model.keras)")
    parser.add_argument("images", help="folder of images, or CSV file (path,label)")
    parser.add_argument("--output", required=True, help="the .npz file to write")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing output file")
    parser.add_argument("--batch-size", type=int, default=64, help="default 64")
    add_skip_argument(parser)
    parser.set_defaults(handler=run)


def run(args):
    """`keras-dml embed`: embeds a folder or CSV list of images into a .npz."""
    import os

    from keras_dml.index.catalogue import list_images, save_embeddings
    from keras_dml.index.runs import load_run

    if os.path.exists(args.output) and not args.overwrite:
        raise FileExistsError(f"{args.output} exists; pass --overwrite to replace it.")
    run = load_run(args.run)
    catalogue = list_images(args.images)
    result = embed_catalogue(run, catalogue, args.batch_size, args.skip_bad_images)
    embeddings = result.embeddings
    save_embeddings(args.output, embeddings, kept(catalogue.ids, result),
                    result.labels if catalogue.labelled else None, args.overwrite)
    print(f"written: {args.output} ({len(embeddings)} x {embeddings.shape[1]}"
          + (", with labels)" if catalogue.labelled else ", no labels)"))
    return 0
