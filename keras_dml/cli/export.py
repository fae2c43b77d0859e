"""`keras-dml export`: a saved .keras model or a train run as a TF Serving SavedModel.

The work is done by `keras_dml.export`, imported only when the command runs.
"""

import json

__all__ = ["add_command", "run"]


def add_command(commands):
    """Adds `export` to the `keras-dml` sub-parsers."""
    parser = commands.add_parser(
        "export", help="export a keras-dml train run or a saved .keras model for TF Serving",
        description="Export a saved .keras model for TF Serving: an embedder, or with "
        "--reference a retriever that searches a gallery in the graph. Given a keras-dml "
        "train run (runs/<run> or its model.keras), the base directory, input format and "
        "preprocessing default to the run's own (its summary.json), and the sidecar's "
        "training_run names the run (its absolute path, dataset, loss and recall).")
    add_arguments(parser)
    parser.set_defaults(handler=run)


def add_arguments(parser):
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
                        help="JSON file describing the training run, stored in the sidecar "
                        "(for a keras-dml train run, with its path added as `run`)")
    return parser


def run(args):
    """`keras-dml export`: runs `export_from_keras_file`; prints the version directory."""
    from keras_dml import backend
    from keras_dml.export import export_from_keras_file  # first: is TensorFlow installed
    from keras_dml.training import apply_run_defaults

    if not backend.is_tensorflow():
        rest = " ..." if args.base_dir else ""
        raise ValueError(f"the SavedModel export traces the model in TensorFlow, and Keras runs "
                         f"on {backend.name()} here: run KERAS_BACKEND=tensorflow keras-dml "
                         f"export {args.model}{rest}")

    args = apply_run_defaults(args)
    run_info = training_run(args.model, args.run_info)
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
            gallery=args.reference, k=args.k, chunk_size=args.chunk_size,
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


def training_run(model_path, run_info_path=None):
    """The sidecar's `training_run`: the `--run-info` file's dict (or None), and for a
    model inside a `keras-dml train` run folder its absolute path as `run` (unless the
    file names one) and the summary's dataset, loss and recall after training."""
    import os

    from keras_dml.training.run_folder import SUMMARY

    info = None
    if run_info_path is not None:
        with open(run_info_path) as f:
            info = json.load(f)
    run_dir = os.path.dirname(os.path.abspath(model_path))
    summary_path = os.path.join(run_dir, SUMMARY)
    if not os.path.isfile(summary_path) or not isinstance(info, (dict, type(None))):
        return info
    with open(summary_path) as f:
        summary = json.load(f)
    config = summary.get("config") or {}
    recorded = {"run": run_dir, "dataset": config.get("dataset"), "loss": config.get("loss"),
                "recall_after": summary.get("recall_after")}
    return {**{k: v for k, v in recorded.items() if v is not None}, **(info or {})}


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
