"""Export from a saved `.keras` model, and the `keras-dml export` command's arguments."""

import argparse
import json
import os

import keras
import numpy as np

from keras_dml.data.preprocessing import Preprocessing
from keras_dml.export.embedder import export_embedder
from keras_dml.export.inputs import INPUT_FORMATS
from keras_dml.export.retriever import export_retriever

KINDS = ("embedder", "retriever")


def load_keras_model(keras_path):
    """Loads a `.keras` model with keras_dml's classes registered, without compiling.

    Raises:
        ValueError: The path does not exist or is not a `.keras` file.
    """
    keras_path = os.fspath(keras_path)
    if not keras_path.endswith(".keras"):
        raise ValueError(f"Expected a .keras model file, got {keras_path!r}.")
    if not os.path.isfile(keras_path):
        raise ValueError(f"No model file at {keras_path!r}.")
    # Importing these registers the serializable keras_dml classes.
    import keras_dml.layers  # noqa: F401
    import keras_dml.losses  # noqa: F401
    import keras_dml.models  # noqa: F401

    return keras.saving.load_model(keras_path, compile=False)


def load_reference(npz_path):
    """Gallery arguments of `export_retriever` from an `.npz` file.

    The file holds `labels` and one of `embeddings` `(N, d)`, `images`
    (model-ready numeric `(N, H, W, C)`) or `paths` (image files, decoded
    with the export's preprocessing).
    """
    sources = ("embeddings", "images", "paths")
    with np.load(os.fspath(npz_path), allow_pickle=False) as data:
        keys = set(data.files)
        found = [key for key in sources if key in keys]
        if "labels" not in keys or len(found) != 1:
            raise ValueError(
                f"{npz_path} must hold 'labels' and one of {sources}; it holds {sorted(keys)}."
            )
        reference = {"reference_labels": data["labels"]}
        values = data[found[0]]
    if found[0] == "embeddings":
        reference["reference_embeddings"] = values
    elif found[0] == "images":
        if values.dtype.kind not in "fiu":
            raise ValueError(
                f"{npz_path}: 'images' must be numeric model-ready images, got dtype "
                f"{values.dtype}; store encoded images as files and list them in 'paths'."
            )
        reference["reference_images"] = values
    else:
        reference["reference_images"] = [_read_bytes(str(path)) for path in values]
    return reference


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def export_from_keras_file(keras_path, base_dir, *, kind="embedder", reference=None, k=10,
                           chunk_size=32768, **kwargs):
    """Loads a `.keras` model and exports it for TF Serving (what `keras-dml export` runs).

    Args:
        keras_path: The saved `.keras` model.
        base_dir: TF Serving's `--model_base_path`.
        kind: `"embedder"` or `"retriever"`. Defaults to `"embedder"`.
        reference: For the retriever, an `.npz` path (see `load_reference`) or
            a dict of `export_retriever` gallery arguments.
        k: Retriever neighbours per query. Defaults to 10.
        chunk_size: Retriever gallery chunk. Defaults to 32768.
        **kwargs: Passed on: `version`, `input_format`, `preprocessing`,
            `overwrite`, `warmup`, `warmup_batch_sizes`, `run_info`, `verify`.

    Returns:
        The version directory written.

    Examples:

    >>> export_from_keras_file("runs/cub.keras", "savedmodels/cub",
    ...                        preprocessing={"image_size": 227})  # doctest: +SKIP
    'savedmodels/cub/1'
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if (kind == "retriever") != (reference is not None):
        raise ValueError("reference= is required for kind='retriever' and only used by it.")
    model = load_keras_model(keras_path)
    if kind == "embedder":
        return export_embedder(model, base_dir, **kwargs)
    if not isinstance(reference, dict):
        reference = load_reference(reference)
    return export_retriever(model, base_dir, k=k, chunk_size=chunk_size, **reference, **kwargs)


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
    parser.add_argument("--input-format", choices=INPUT_FORMATS, default=None,
                        help="default image_bytes (a keras-dml train run: the run's)")
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
    parser.add_argument("--warmup-batch-sizes", default="1",
                        help="comma-separated warm-up batch sizes (default: 1)")
    parser.add_argument("--no-warmup", action="store_true", help="write no warm-up file")
    parser.add_argument("--no-verify", action="store_true",
                        help="skip reloading the export to check it")
    parser.add_argument("--run-info", default=None,
                        help="JSON file describing the training run, stored in the sidecar")
    return parser


def export_from_args(args):
    """Runs `export_from_keras_file` for parsed `add_export_arguments` arguments."""
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
    return export_from_keras_file(
        args.model, args.base_dir,
        kind="retriever" if args.reference else "embedder",
        reference=args.reference, k=args.k, chunk_size=args.chunk_size,
        version=args.version, overwrite=args.overwrite,
        input_format=args.input_format or "image_bytes",
        preprocessing=_preprocessing_from_args(args), warmup=not args.no_warmup,
        warmup_batch_sizes=sizes, run_info=run_info, verify=not args.no_verify,
    )


def _preprocessing_from_args(args):
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
    return Preprocessing(**fields)


def build_parser():
    """A standalone `keras-dml export` parser (for `python -m` use and tests)."""
    parser = argparse.ArgumentParser(
        prog="keras-dml export",
        description="Export a saved .keras model for TF Serving.")
    return add_export_arguments(parser)
