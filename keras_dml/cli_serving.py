"""Arguments and handlers of `keras-dml export`, `index`, `search` and `calibrate`.

Parsing lives here, with the CLI; the work is done by `keras_dml.export`,
imported only when a command runs (so `keras-dml --help` does not load
TensorFlow).
"""

import json


def add_commands(commands):
    """Adds the serving commands to the `keras-dml` sub-parsers."""
    export_parser = commands.add_parser(
        "export", help="export a keras-dml train run or a saved .keras model for TF Serving",
        description="Export a saved .keras model for TF Serving: an embedder, or with "
        "--reference a retriever that searches a gallery in the graph. Given a keras-dml "
        "train run (runs/<run> or its model.keras), the base directory, input format and "
        "preprocessing default to the run's own (its summary.json).")
    add_export_arguments(export_parser)
    export_parser.set_defaults(handler=run_export)
    add_index_commands(commands)


def add_export_arguments(parser):
    """Adds the `keras-dml export` arguments to an `argparse` parser."""
    parser.add_argument("model", help="saved .keras model, or a keras-dml train run folder")
    parser.add_argument("base_dir", nargs="?", default=None,
                        help="model base path, e.g. savedmodels/<run>; the export goes to "
                        "<base_dir>/<version> (default for a keras-dml train run: its own)")
    parser.add_argument("--version", type=int, default=None,
                        help="version number (default: one more than the highest present)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the version if it exists")
    parser.add_argument("--input-format", default=None,
                        help="image_bytes (encoded images, default) or images (float "
                        "batches); a keras-dml train run: the run's")
    prep = parser.add_argument_group("preprocessing (image_bytes decoding; recorded for images)")
    prep.add_argument("--preprocessing", default=None,
                      help="JSON file with Preprocessing fields, or an export sidecar")
    for field, kind in (("image-size", int), ("resize-size", int), ("channels", int),
                        ("normalization", str), ("resize-mode", str)):
        prep.add_argument(f"--{field}", type=kind, default=None)
    retrieval = parser.add_argument_group("retrieval")
    retrieval.add_argument("--reference", default=None,
                           help=".npz gallery (labels + embeddings, images or paths): "
                           "exports a retriever instead of an embedder")
    retrieval.add_argument("--k", type=int, default=10)
    retrieval.add_argument("--chunk-size", type=int, default=32768)
    retrieval.add_argument("--threshold", type=float, default=None,
                           help="calibrated similarity threshold: the retriever also "
                           "returns match (label or -1) and is_match")
    parser.add_argument("--warmup-batch-sizes", default="1",
                        help="comma-separated warm-up batch sizes (default: 1)")
    parser.add_argument("--no-warmup", action="store_true", help="write no warm-up file")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip reloading the export to check it")
    parser.add_argument("--run-info", default=None,
                        help="JSON file describing the training run, stored in the sidecar")
    return parser


def run_export(args):
    """`keras-dml export`: runs `export_from_keras_file`; prints the version directory."""
    from keras_dml.export import export_from_keras_file
    from keras_dml.training import apply_run_defaults

    args = apply_run_defaults(args)
    run_info = None
    if args.run_info is not None:
        with open(args.run_info) as f:
            run_info = json.load(f)
    try:
        sizes = tuple(int(s) for s in args.warmup_batch_sizes.split(","))
    except ValueError:
        raise ValueError(
            f"--warmup-batch-sizes must be comma-separated ints, got {args.warmup_batch_sizes!r}."
        ) from None
    from keras_dml.export.inputs import MissingPreprocessing

    try:
        path = export_from_keras_file(
            args.model, args.base_dir,
            kind="retriever" if args.reference else "embedder",
            reference=args.reference, k=args.k, chunk_size=args.chunk_size,
            threshold=args.threshold, version=args.version, overwrite=args.overwrite,
            input_format=args.input_format, preprocessing=preprocessing_from_args(args),
            warmup=not args.no_warmup, warmup_batch_sizes=sizes, run_info=run_info,
            verify=not args.no_verify,
        )
    except MissingPreprocessing:
        raise ValueError(
            f"{args.model} records no preprocessing (it was not fitted on a keras_dml "
            "stream), and --input-format image_bytes decodes images in the graph: pass the "
            "evaluation preprocessing as --image-size N --resize-size N --normalization NAME "
            "(or --preprocessing FILE.json), or --input-format images for model-ready "
            "image batches.") from None
    print(f"SavedModel: {path}")
    return 0


def preprocessing_from_args(args):
    """`--preprocessing FILE`, or a `Preprocessing` from the individual options, or None."""
    fields = {name: getattr(args, name) for name in
              ("image_size", "resize_size", "channels", "normalization", "resize_mode")
              if getattr(args, name) is not None}
    if args.preprocessing is not None and fields:
        raise ValueError("Pass either --preprocessing or the individual --image-size/... "
                         "options, not both.")
    if args.preprocessing is not None:
        return args.preprocessing
    if not fields:
        return None
    from keras_dml.data.preprocessing import Preprocessing

    return Preprocessing(**fields)


# -- embed, index, search, calibrate ---------------------------------------------------------


def add_index_commands(commands):
    """Adds `keras-dml embed`, `index`, `search` and `calibrate`."""
    embed_parser = commands.add_parser(
        "embed", help="embed a folder or CSV list of images with a run's embedder",
        description="Embed every image of a folder (recursively: root/<class>/<image>, "
        "images directly in the folder without a class) or of a CSV list (path,label) with "
        "a run's embedder and preprocessing, into a .npz that NumPy reads without keras_dml: "
        "embeddings (n, d) float32, ids (paths relative to the folder, or as the CSV lists "
        "them) and labels (class names; '' outside a class folder) when there are any.")
    embed_parser.add_argument("run", help="run directory (runs/<run>, holds model.keras)")
    embed_parser.add_argument("images", help="folder of images, or CSV file (path,label)")
    embed_parser.add_argument("--output", required=True, help="the .npz file to write")
    embed_parser.add_argument("--overwrite", action="store_true",
                              help="replace an existing output file")
    embed_parser.add_argument("--batch-size", type=int, default=64, help="default 64")
    embed_parser.set_defaults(handler=run_embed)

    index_parser = commands.add_parser(
        "index", help="build and save a searchable index from a run's embedder",
        description="Embed a dataset split, or any folder or CSV list of images (--images), "
        "with a run's embedder and save a keras_dml.index.Index (NumPy + JSON) to search with "
        "`keras-dml search`. With --images the items' labels are the class folders (or CSV "
        "labels) and their metadata the image paths relative to the folder.")
    index_parser.add_argument("run", help="run directory (runs/<run>, holds model.keras)")
    _add_data_arguments(index_parser)
    index_parser.add_argument("--output", default=None,
                              help="index directory (default: <run>/index)")
    index_parser.add_argument("--backend", default="exact",
                              help="exact (default), faiss_ivf or faiss_hnsw")
    index_parser.add_argument("--overwrite", action="store_true",
                              help="replace an existing index directory")
    index_parser.set_defaults(handler=run_index)

    search_parser = commands.add_parser(
        "search", help="print the top-k index items of image files",
        description="Embed image files with the index's run embedder and print the k most "
        "similar items (their image path when the index holds one, else their id; label; "
        "score), and with --threshold the match decision.")
    search_parser.add_argument("index", help="index directory written by `keras-dml index`")
    search_parser.add_argument("images", nargs="+", help="image files (PNG, JPEG, ...)")
    search_parser.add_argument("--k", type=int, default=5, help="default 5")
    search_parser.add_argument("--threshold", default=None,
                               help="similarity threshold for match/unknown, or 'calibrated' "
                               "(the run's calibration.json)")
    search_parser.set_defaults(handler=run_search)

    calibrate_parser = commands.add_parser(
        "calibrate", help="choose a match threshold for a target precision or FAR",
        description="Score the pairs of a held-out split, or of a labelled folder or CSV list "
        "(--images), with a run's embedder, choose the "
        "lowest similarity threshold reaching the target, and write calibration.json, "
        "threshold_table.csv and the ROC/PR/histogram figures into <run>/calibration; "
        "optionally export a retriever that returns the match decision.")
    calibrate_parser.add_argument("run", help="run directory (runs/<run>)")
    target = calibrate_parser.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-precision", type=float, default=None)
    target.add_argument("--target-far", type=float, default=None)
    _add_data_arguments(calibrate_parser)
    calibrate_parser.add_argument("--max-pairs", type=int, default=5_000_000,
                                  help="pairs scored at most; sampled beyond (default 5e6)")
    calibrate_parser.add_argument("--export", default=None, metavar="BASE_DIR",
                                  help="also export a retriever with the threshold to "
                                  "BASE_DIR/<version>, its gallery the --index (or the split)")
    calibrate_parser.add_argument("--index", default=None,
                                  help="gallery of the exported retriever (an index directory)")
    calibrate_parser.add_argument("--k", type=int, default=5, help="retriever top-k (default 5)")
    calibrate_parser.add_argument("--no-plots", action="store_true", help="skip the figures")
    calibrate_parser.set_defaults(handler=run_calibrate)


def _add_data_arguments(parser):
    parser.add_argument("--images", default=None, metavar="DIR|CSV",
                        help="a folder of images (root/<class>/<image>) or a CSV list "
                        "(path,label), instead of a dataset split")
    parser.add_argument("--dataset", default=None,
                        help="dataset name (default: the run's training dataset)")
    parser.add_argument("--split", default="test",
                        help="test (default: held-out classes), train, query or gallery")
    parser.add_argument("--data-dir", default=None, help="local dataset folder")


def _embedded(args, run):
    """`(embeddings, labels, metadata, info)` of --images or of the dataset split."""
    import os

    from keras_dml.index.catalogue import list_images
    from keras_dml.index.embedding import embed_batches
    from keras_dml.index.runs import split_batches

    info = {"run": os.path.abspath(run.run_dir)}
    if args.images is not None:
        if args.dataset is not None or args.data_dir is not None:
            raise ValueError("Pass either --images or --dataset/--data-dir, not both.")
        catalogue = list_images(args.images)
        embeddings = _embed_catalogue(run, catalogue)
        info.update(images=os.path.abspath(args.images), root=catalogue.root)
        labels = catalogue.labels if catalogue.labelled else None
        return embeddings, labels, catalogue.ids, info
    batches, class_names = split_batches(run, args.dataset, args.split, args.data_dir)
    embeddings, labels = embed_batches(run.embedder, batches)
    info.update(dataset=args.dataset or run.dataset, split=args.split,
                class_names=class_names)
    return embeddings, labels, None, info


def _embed_catalogue(run, catalogue, batch_size=64):
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


def run_embed(args):
    """`keras-dml embed`: embeds a folder or CSV list of images into a .npz."""
    import os

    from keras_dml.index.catalogue import list_images, save_embeddings
    from keras_dml.index.runs import load_run

    if os.path.exists(args.output) and not args.overwrite:
        raise FileExistsError(f"{args.output} exists; pass --overwrite to replace it.")
    run = load_run(args.run)
    catalogue = list_images(args.images)
    embeddings = _embed_catalogue(run, catalogue, args.batch_size)
    save_embeddings(args.output, embeddings, catalogue.ids,
                    catalogue.labels if catalogue.labelled else None, args.overwrite)
    print(f"written: {args.output} ({len(embeddings)} x {embeddings.shape[1]}"
          + (", with labels)" if catalogue.labelled else ", no labels)"))
    return 0


def run_index(args):
    """`keras-dml index`: embeds the split or the images and saves the index; prints where."""
    import os

    from keras_dml.index import Index
    from keras_dml.index.runs import load_run

    run = load_run(args.run)
    output = args.output or os.path.join(args.run, "index")
    if os.path.exists(output) and not args.overwrite:
        raise FileExistsError(f"{output} exists; pass --overwrite to replace it.")
    embeddings, labels, metadata, info = _embedded(args, run)
    index = Index(backend=args.backend, info=info)
    index.add(embeddings, labels=labels, metadata=metadata)
    index.save(output, overwrite=args.overwrite)
    print(f"index: {output} ({len(index)} items, dimension {index.dim}, {args.backend})")
    return 0


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


def run_search(args):
    """`keras-dml search`: prints the top-k of each image (and the match decision)."""
    from keras_dml.index import Index
    from keras_dml.index.runs import image_files, load_run

    index = Index.load(args.index)
    if "run" not in index.info:
        raise ValueError(f"{args.index} records no run to embed images with: build it with "
                         "`keras-dml index RUN`.")
    run = load_run(index.info["run"])
    threshold = _threshold(args.threshold, index.info["run"])
    queries = run.embedder.predict(image_files(run, args.images), verbose=0)
    result = index.search(queries, min(args.k, len(index)))
    matches = None if threshold is None else index.match(queries, threshold)
    named = _class_namer(index.info.get("class_names"))
    for row, path in enumerate(args.images):
        decision = "" if matches is None else f"  match: {named(matches[row])}"
        print(f"{path}{decision}")
        for rank in range(result.ids.shape[1]):
            item = result.metadata[row][rank]
            item = f"id {result.ids[row, rank]:<8}" if item is None else str(item)
            print(f"  {rank + 1:>2}. {item}  label {named(result.labels[row, rank]):<10} "
                  f"score {result.scores[row, rank]:.4f}")
    return 0


def _class_namer(class_names):
    """`label -> "label (class name)"` when the index records its split's class names."""
    import numpy as np

    def named(label):
        if class_names and isinstance(label, (int, np.integer)) and 0 <= label < len(
                class_names):
            return f"{label} ({class_names[label]})"
        return str(label) if str(label) else "-"

    return named


def run_calibrate(args):
    """`keras-dml calibrate`: threshold, table and figures into <run>/calibration."""
    import os

    from keras_dml.evaluation import calibrate_scores, pair_scores
    from keras_dml.index.runs import load_run

    run = load_run(args.run)
    embeddings, labels, _, info = _embedded(args, run)
    if args.images is not None:
        embeddings, labels = _labelled(embeddings, labels, args.images)
    scores, same = pair_scores(embeddings, labels, max_pairs=args.max_pairs)
    target, value = (("precision", args.target_precision) if args.target_precision is not None
                     else ("far", args.target_far))
    calibration = calibrate_scores(scores, same, target, value)
    folder = os.path.join(args.run, "calibration")
    os.makedirs(folder, exist_ok=True)
    calibration.write_csv(os.path.join(folder, "threshold_table.csv"))
    source = ({"images": info["images"]} if args.images is not None
              else {"dataset": info["dataset"], "split": args.split})
    summary = {**calibration.to_dict(), **source, "pairs": int(len(scores))}
    if not args.no_plots:
        from keras_dml import plots

        metrics = plots.verification_curves(scores, same, os.path.join(
            folder, "verification_curves.png"), threshold=calibration.threshold)
        plots.score_histograms(scores, same, os.path.join(folder, "score_histograms.png"),
                               threshold=calibration.threshold)
        summary["verification"] = {k: v for k, v in metrics.items() if k != "curves"}
    with open(os.path.join(folder, "calibration.json"), "w") as f:
        json.dump(summary, f, indent=2)
    achieved = calibration.achieved
    print(f"threshold {calibration.threshold:.6f} for {target} "
          f"{'>=' if target == 'precision' else '<='} {value}: precision "
          f"{achieved['precision']:.4f}, recall {achieved['recall']:.4f}, FAR "
          f"{achieved['far']:.2e} on {len(scores)} pairs of "
          f"{args.images or summary['dataset'] + '/' + args.split}; "
          f"support: {calibration.support_same:,} same-class pairs of {calibration.support:,} "
          "at or above the threshold")  # (a too small support is warned about)
    print(f"written: {folder}/calibration.json, threshold_table.csv"
          + ("" if args.no_plots else ", verification_curves.png, score_histograms.png"))
    if args.export:
        _export_calibrated(args, run, calibration.threshold, embeddings, labels)
    return 0


def _labelled(embeddings, labels, images):
    """The images with a class: calibration pairs need labels."""
    import numpy as np

    if labels is None:
        raise ValueError(f"{images} holds no class folders (or labels): calibration needs "
                         "labelled images, root/<class>/<image>.")
    labels = np.asarray(labels)
    keep = labels != ""
    if not keep.all():
        print(f"calibrate: left out {int((~keep).sum())} images outside any class folder")
    return embeddings[keep], labels[keep]


def _export_calibrated(args, run, threshold, embeddings, labels):
    """The retriever: runs on in-memory datasets take float images, others encoded bytes."""
    from keras_dml.export import export_retriever
    from keras_dml.index import Index
    from keras_dml.index.runs import preprocessing

    if args.index:
        index = Index.load(args.index)
        embeddings, labels = index.embeddings, index.labels

    path = export_retriever(
        run.embedder, args.export, reference_embeddings=embeddings, reference_labels=labels,
        k=min(args.k, len(labels)), threshold=threshold,
        input_format="images" if run.in_memory else "image_bytes",
        preprocessing=None if run.in_memory else preprocessing(run),
        run_info={"run": run.run_dir, "threshold": threshold})
    print(f"retriever with threshold: {path}")
