"""The JSON sidecar `base_dir/<version>/keras_dml_export.json`.

It tells a client (or an operator) what the SavedModel expects and returns
without loading it: input format and preprocessing, output names, dtypes and
shapes, embedding size, the embedder's `model_fingerprint` (the one an index
records in its provenance, so a service checks that both come from one model),
retrieval gallery, warm-up, and the training run. TF Serving ignores the file.
"""

import datetime
import json

import keras
import numpy as np

from keras_dml import backend
from keras_dml.export.layout import SIDECAR_NAME

__all__ = ["export_info", "plain_run_info", "read_export_info", "write_export_info"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")

FORMAT = "keras_dml.export/1"


def export_info(kind, version, serving_input, outputs, embedding_dim, run_info=None,
                model_fingerprint=None, **sections):
    """The sidecar dict.

    Args:
        kind: `"embedder"` or `"retriever"`.
        version: The version number.
        serving_input: The export's `ServingInput`.
        outputs: Dict output name -> dict (dtype, shape, description).
        embedding_dim: Embedding size d.
        run_info: Dict describing the training run (JSON values, NumPy
            scalars or arrays), or None.
        model_fingerprint: `keras_dml.models.fingerprint.model_fingerprint` of
            the exported embedder, or None.
        **sections: Further JSON-serialisable sections (e.g. `retrieval`).

    Raises:
        ValueError: `run_info` is not a JSON-serialisable dict.
    """
    run_info = plain_run_info(run_info)
    from keras_dml import __version__

    preprocessing = serving_input.preprocessing
    return {
        "format": FORMAT,
        "kind": kind,
        "version": version,
        "created_utc": datetime.datetime.now(datetime.timezone.utc)
        .isoformat(timespec="seconds"),
        "signature_name": "serving_default",
        "inputs": {serving_input.name: serving_input.describe()},
        "outputs": outputs,
        "embedding_dim": embedding_dim,
        "model_fingerprint": model_fingerprint,
        # what the SavedModel does (image_bytes) or wants done (images): the evaluation
        # transform, without the training augmentation (flip, crop)
        "preprocessing": None if preprocessing is None else preprocessing.evaluation_dict(),
        **sections,
        "training_run": run_info,
        "software": {
            "keras_dml": __version__,
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
        },
    }


def plain_run_info(run_info):
    """`run_info` as plain JSON values (NumPy scalars / arrays converted).

    Raises:
        ValueError: `run_info` is not a dict of JSON-serialisable values.
    """
    if run_info is not None and not isinstance(run_info, dict):
        raise ValueError(f"run_info must be a dict, got {type(run_info).__name__}.")
    try:
        return json.loads(json.dumps(run_info, default=_plain))
    except (TypeError, ValueError) as error:
        raise ValueError(f"run_info must be JSON-serialisable: {error}.") from None


def _plain(value):
    """NumPy scalars and arrays (typical metric values) as plain JSON values."""
    if isinstance(value, (np.generic, np.ndarray)):
        return value.tolist()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def write_export_info(export_dir, info):
    """Writes `info` as the sidecar of `export_dir`; returns its path."""
    path = tf.io.gfile.join(export_dir, SIDECAR_NAME)
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump(info, f, indent=2, sort_keys=False)
        f.write("\n")
    return path


def read_export_info(export_dir):
    """The sidecar of an export version directory, as a dict.

    Examples:

    >>> info = read_export_info("savedmodels/cub/3")  # doctest: +SKIP
    >>> outputs = info["outputs"]  # doctest: +SKIP
    >>> outputs["embedding"].get("shape")  # doctest: +SKIP
    [None, 512]
    """
    path = tf.io.gfile.join(str(export_dir), SIDECAR_NAME)
    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"{path} does not exist: not a keras_dml export version.")
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)
