"""The embedding of a served catalogue: an exported SavedModel or a run's `.keras` model.

Both take encoded image bytes: a SavedModel export with `image_bytes` input
decodes and preprocesses them in its own graph (as TF Serving does); a run's
model gets them decoded and prepared by the run's preprocessing (as
`keras-dml index` embedded the catalogue), on any Keras backend.
"""

import dataclasses
import json
import os

import numpy as np

__all__ = ["DecodeError", "Embedder", "calibrated_threshold", "load_embedder"]

SIDECAR = "keras_dml_export.json"  # keras_dml.export.layout.SIDECAR_NAME


class DecodeError(ValueError):
    """One upload the model's decoder refused (truncated or damaged)."""


@dataclasses.dataclass
class Embedder:
    """`embed(list of encoded images) -> list of float32 vectors or DecodeError`, one per
    image; `fingerprint` (None when the model records none), `source` (a path, or a
    pretrained backbone's name) and `kind` ("savedmodel" or "run"); `run_dir` for a
    run (None for a pretrained backbone)."""

    embed: object
    fingerprint: object
    source: str
    kind: str
    run_dir: object = None


def load_embedder(path):
    """The `Embedder` at `path`: an export version directory (with the keras_dml sidecar),
    an export base directory (its newest version), a run directory or a `.keras` file;
    or the name of a pretrained backbone without training ("hub:PRESET" or a Keras
    Applications family, as `keras-dml index --backbone` records it).

    Raises:
        FileNotFoundError: Nothing of these at `path`.
        ValueError: An export that is not an `image_bytes` embedder.
    """
    from keras_dml.backbone_families import pretrained_name

    path = os.fspath(path)
    if pretrained_name(path) and not os.path.exists(path):
        return _run(path)
    version = _export_version(path)
    if version is not None:
        return _savedmodel(version)
    if path.endswith(".keras") or os.path.isfile(os.path.join(path, "model.keras")):
        return _run(path)
    raise FileNotFoundError(f"{path} is neither a SavedModel export (keras-dml export), a "
                            "run (a folder with model.keras, or a .keras file) nor a "
                            "pretrained backbone (hub:PRESET or a Keras Applications name).")


def _export_version(path):
    if os.path.isfile(os.path.join(path, SIDECAR)):
        return path
    if not os.path.isdir(path):
        return None
    versions = [int(name) for name in os.listdir(path) if name.isdigit()
                and os.path.isfile(os.path.join(path, name, SIDECAR))]
    return os.path.join(path, str(max(versions))) if versions else None


def _savedmodel(version):
    import tensorflow as tf

    from keras_dml.export.load import load_embedder_export
    from keras_dml.export.sidecar import read_export_info

    info = read_export_info(version)
    embed, serving, _ = load_embedder_export(version)
    if serving.input_format != "image_bytes":
        raise ValueError(f"{version} takes {serving.input_format!r}, not encoded images: "
                         "export it with --input-format image_bytes to serve it.")

    def embed_bytes(images):
        try:
            return list(np.asarray(embed(tf.constant(images)), np.float32))
        except tf.errors.InvalidArgumentError:
            if len(images) == 1:
                return [DecodeError("the image could not be decoded (truncated or damaged).")]
            return [row for image in images for row in embed_bytes([image])]

    return Embedder(embed_bytes, info.get("model_fingerprint"), os.path.abspath(version),
                    "savedmodel")


def _run(path):
    import keras

    from keras_dml.data.preprocessing import decode_image
    from keras_dml.index.provenance import model_fingerprint
    from keras_dml.index.runs import load_run, preprocessing

    run = load_run(path)
    prepare = preprocessing(run)
    model = run.embedder

    def one(image):
        try:
            return np.asarray(prepare.eval(decode_image(image, prepare.channels)), np.float32)
        except Exception:  # TensorFlow's InvalidArgumentError: a damaged file
            return DecodeError("the image could not be decoded (truncated or damaged).")

    def embed_bytes(images):
        prepared = [one(image) for image in images]
        good = [i for i, x in enumerate(prepared) if not isinstance(x, DecodeError)]
        if good:
            batch = np.stack([prepared[i] for i in good])
            vectors = keras.ops.convert_to_numpy(model(batch, training=False))
            for row, i in enumerate(good):
                prepared[i] = np.asarray(vectors[row], np.float32)
        return prepared

    return Embedder(embed_bytes, model_fingerprint(model), run.source, "run", run.run_dir)


def calibrated_threshold(run_dir):
    """The threshold of `run_dir/calibration/calibration.json`, or None without one."""
    path = os.path.join(run_dir, "calibration", "calibration.json")
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return float(json.load(f)["threshold"])
