"""`export_embedder`: the embedding network as a TF Serving SavedModel."""

import tensorflow as tf

from keras_dml.export.inputs import serving_input
from keras_dml.export.writer import write_export


def embedding_fn(model, l2_normalize=True):
    """`images -> float32 (batch, d)` embeddings of `model` in inference mode.

    Args:
        model: A Keras model mapping an image batch to one embedding tensor.
        l2_normalize: Scale embeddings to unit L2 norm (idempotent for models
            that end with `EmbeddingHead`). Defaults to True.
    """
    def embed(images):
        outputs = model(images, training=False)
        if isinstance(outputs, (list, tuple, dict)):
            raise ValueError(
                f"The model must return one embedding tensor, got a {type(outputs).__name__} "
                f"of {len(outputs)} outputs."
            )
        outputs = tf.cast(outputs, tf.float32)
        if outputs.shape.rank != 2 or outputs.shape[-1] is None:
            raise ValueError(
                f"The model must return embeddings of shape (batch, d), got shape {outputs.shape}."
            )
        return tf.math.l2_normalize(outputs, axis=1) if l2_normalize else outputs

    return embed


def embedding_dim(model, embed, image_spec):
    """The embedding size d: from a functional model's output, else a trace of `embed`."""
    try:
        outputs = model.outputs
    except AttributeError:  # subclassed model: no symbolic outputs
        outputs = None
    if outputs and len(outputs) == 1 and len(outputs[0].shape) == 2 \
            and outputs[0].shape[-1] is not None:
        return int(outputs[0].shape[-1])
    spec = tf.function(embed).get_concrete_function(image_spec).structured_outputs
    return int(spec.shape[-1])


def export_embedder(model, base_dir, version=None, input_format="image_bytes",
                    preprocessing=None, overwrite=False, *, l2_normalize=True, warmup=True,
                    warmup_batch_sizes=(1,), warmup_inputs=None, run_info=None, verify=True):
    """Exports the embedding network for TF Serving as `base_dir/<version>`.

    The SavedModel has one signature, `serving_default`: input `image_bytes`
    (string `(batch,)`, encoded JPEG/PNG/GIF/BMP/WebP, decoded and preprocessed
    in the graph exactly as `Preprocessing.eval` does at evaluation) or
    `images` (float `(batch, H, W, C)`, already preprocessed); output
    `embedding`, float32 `(batch, d)`: `model.predict` on the evaluation
    tensor, rescaled to unit norm (for models ending in `EmbeddingHead`,
    `model.predict` itself). Only TensorFlow ops, no `py_function`;
    only the variables the embedding reads are saved (no loss weights such as
    proxies, no optimizer state). Next to it: the warm-up file
    `assets.extra/tf_serving_warmup_requests` and the JSON sidecar
    `keras_dml_export.json`. The version is written to a hidden staging
    directory, checked by reloading, and renamed into place only when complete.

    Args:
        model: A built Keras model (e.g. `DMLModel`) with one image input and
            one embedding output.
        base_dir: TF Serving's `--model_base_path` (local or `tf.io.gfile` path).
        version: Positive int. Defaults to `None`: one more than the highest
            version present (1 for a new base_dir).
        input_format: `"image_bytes"` or `"images"`. Defaults to `"image_bytes"`.
        preprocessing: The evaluation `keras_dml.data.Preprocessing` (or its
            dict / a JSON file holding it). Required for `"image_bytes"` unless
            the model has a `preprocessing` attribute; for `"images"` it is
            only recorded in the sidecar for clients. Defaults to None.
        overwrite: Replace an existing version. Defaults to False (an existing
            version is a `FileExistsError`).
        l2_normalize: L2-normalise the output. Defaults to True.
        warmup: Write TF Serving warm-up requests (needs the
            `tensorflow-serving-api` package). Defaults to True.
        warmup_batch_sizes: One synthetic warm-up request per batch size.
            Defaults to (1,).
        warmup_inputs: A batch of real inputs (list of encoded images, or an
            image array) used instead of synthetic ones. Defaults to None.
        run_info: JSON-serialisable dict about the training run (dataset,
            loss, epochs, metrics), stored in the sidecar. Defaults to None.
        verify: Reload the written SavedModel and check it against the
            in-process model before publishing. Defaults to True.

    Returns:
        The version directory, `base_dir/<version>`.

    Raises:
        ValueError: Bad model, input format, preprocessing or arguments.
        FileExistsError: The version exists and `overwrite` is False.

    Examples:

    >>> path = export_embedder(model, "savedmodels/cub",
    ...                        preprocessing=Preprocessing(image_size=227))  # doctest: +SKIP
    >>> path  # doctest: +SKIP
    'savedmodels/cub/1'
    """
    serving = serving_input(model, input_format, preprocessing)
    embed = embedding_fn(model, l2_normalize)
    dim = embedding_dim(model, embed, serving.image_spec)

    def serve(inputs):
        return {"embedding": embed(serving.to_images(inputs))}

    norm = "unit L2 norm" if l2_normalize else "not normalised"
    return write_export(
        base_dir, serve, serving, kind="embedder", embedding_dim=dim,
        describe={"embedding": f"Embedding of each input image, {norm}."},
        run_info=run_info, version=version, overwrite=overwrite, warmup=warmup,
        warmup_batch_sizes=warmup_batch_sizes, warmup_inputs=warmup_inputs, verify=verify,
    )
