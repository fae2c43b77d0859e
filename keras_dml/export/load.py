"""Step 1 of an export: load the model and the gallery from files."""

import os

import keras
import numpy as np

__all__ = ["load_embedder_export", "load_gallery_file", "load_keras_model"]

GALLERY_SOURCES = ("embeddings", "images", "paths")


def load_keras_model(keras_path):
    """Loads a `.keras` model with keras_dml's classes registered, without compiling.

    Keras' `safe_mode` stays on: loading never runs code stored in the file. A model
    holding a KerasHub backbone imports KerasHub first.

    Raises:
        ValueError: The path does not exist or is not a `.keras` file.
        ImportError: The model holds a KerasHub backbone and KerasHub is missing.
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
    from keras_dml.hub_backbones import import_keras_hub_for

    import_keras_hub_for(keras_path)
    return keras.saving.load_model(keras_path, compile=False)


def load_gallery_file(npz_path):
    """The gallery arguments of `export_retriever` from an `.npz` file.

    The file holds `labels` and one of `embeddings` `(N, d)`, `images`
    (model-ready numeric `(N, H, W, C)`) or `paths` (image files, decoded
    with the export's preprocessing). Read without pickle.

    Returns:
        A dict with `gallery_labels` and `gallery_embeddings` or
        `gallery_images`.
    """
    with np.load(os.fspath(npz_path), allow_pickle=False) as data:
        keys = set(data.files)
        found = [key for key in GALLERY_SOURCES if key in keys]
        if "labels" not in keys or len(found) != 1:
            raise ValueError(
                f"{npz_path} must hold 'labels' and one of {GALLERY_SOURCES}; it holds "
                f"{sorted(keys)}."
            )
        gallery = {"gallery_labels": data["labels"]}
        values = data[found[0]]
    if found[0] == "embeddings":
        gallery["gallery_embeddings"] = values
    elif found[0] == "images":
        if values.dtype.kind not in "fiu":
            raise ValueError(
                f"{npz_path}: 'images' must be numeric model-ready images, got dtype "
                f"{values.dtype}; store encoded images as files and list them in 'paths'."
            )
        gallery["gallery_images"] = values
    else:
        gallery["gallery_images"] = [_read_bytes(str(path)) for path in values]
    return gallery


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def load_embedder_export(embedder_dir):
    """`(embed, serving_input, dim)` of an embedder export, loaded with TensorFlow.

    `embed` maps the signature input (checked and decoded by the export's own
    graph) to its `embedding` output.
    """
    import tensorflow as tf

    from keras_dml.export.inputs import ServingInput, as_preprocessing
    from keras_dml.export.sidecar import read_export_info

    info = read_export_info(embedder_dir)
    if info.get("kind") != "embedder":
        raise ValueError(f"{embedder_dir} is a {info.get('kind')!r} export, not an embedder.")
    loaded = tf.saved_model.load(str(embedder_dir))
    signature = loaded.signatures[info["signature_name"]]
    (name, spec), = signature.structured_input_signature[1].items()
    spec = tf.TensorSpec(spec.shape, spec.dtype, name=name)
    serving = ServingInput(info["inputs"][name]["format"], spec, spec,
                           as_preprocessing(info.get("preprocessing")))

    def embed(inputs):  # reads `loaded`, which keeps the embedder's variables alive
        return loaded.signatures[info["signature_name"]](**{name: inputs})["embedding"]

    return embed, serving, int(info["embedding_dim"])
