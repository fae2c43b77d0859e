"""The export entry points: each runs the steps in order.

load (`load`) -> serving input (`inputs`) -> embed (`embed`) -> gallery
(`gallery`, retriever only) -> write (`writer`) -> verify (`verify`).
"""

from keras_dml import backend, hyperparameters
from keras_dml.export.embed import embedding_fn
from keras_dml.export.embed import gallery_embeddings as embedded_gallery
from keras_dml.export.gallery import OUTPUT_DESCRIPTIONS, build_gallery, search_fn
from keras_dml.export.inputs import serving_input
from keras_dml.export.load import load_embedder_export, load_gallery_file, load_keras_model
from keras_dml.export.sidecar import read_export_info
from keras_dml.export.writer import write_export
from keras_dml.models.fingerprint import model_fingerprint

__all__ = ["export_embedder", "export_from_keras_file", "export_gallery", "export_retriever"]

KINDS = ("embedder", "retriever")


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
    `keras_dml_export.json`, which records the model's `model_fingerprint` (the
    one an index of its embeddings records). The version is written to a hidden staging
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
        keras_dml.backend.TensorFlowBackendRequiredError: Keras runs on JAX or
            PyTorch (export the saved `.keras` file with `KERAS_BACKEND=tensorflow
            keras-dml export`).

    Examples:

    >>> path = export_embedder(model, "savedmodels/cub",
    ...                        preprocessing=Preprocessing(image_size=227))  # doctest: +SKIP
    >>> path  # doctest: +SKIP
    'savedmodels/cub/1'
    """
    backend.require_tensorflow_backend("the SavedModel export")
    serving = serving_input(model, input_format, preprocessing)
    embed, dim = embedding_fn(model, serving.image_spec, l2_normalize)

    def serve(inputs):
        return {"embedding": embed(serving.to_images(inputs))}

    norm = "unit L2 norm" if l2_normalize else "not normalised"
    return write_export(
        base_dir, serve, serving, kind="embedder", embedding_dim=dim,
        describe={"embedding": f"Embedding of each input image, {norm}."},
        run_info=run_info, version=version, overwrite=overwrite, warmup=warmup,
        warmup_batch_sizes=warmup_batch_sizes, warmup_inputs=warmup_inputs, verify=verify,
        model_fingerprint=model_fingerprint(model),
    )


@hyperparameters.renamed_keywords(reference_images="gallery_images",
                                  reference_embeddings="gallery_embeddings",
                                  reference_labels="gallery_labels")
def export_retriever(model, base_dir, gallery_images=None, gallery_embeddings=None,
                     gallery_labels=None, k=10, *, version=None, input_format="image_bytes",
                     preprocessing=None, overwrite=False, chunk_size=32768, batch_size=256,
                     warmup=True, warmup_batch_sizes=(1,), warmup_inputs=None, run_info=None,
                     verify=True, threshold=None):
    """Exports image retrieval for TF Serving as `base_dir/<version>`.

    Signature `serving_default`: the input of `export_embedder` (`image_bytes`
    or `images`), outputs `indices` (int64 `(batch, k)`, rows of the
    gallery), `labels` (`(batch, k)`, their labels: int64, or string for
    string labels) and `scores` (float32 `(batch, k)`, cosine similarity),
    best first (and, with a `threshold`, `match` and `is_match`). The gallery lives in
    the SavedModel, so TF Serving alone serves retrieval. Layout, warm-up, sidecar and
    publishing are as in `export_embedder`; the sidecar's `retrieval` section records
    the gallery.

    Size limits: the gallery takes `N x d x 4` bytes of server RAM (1M x 128
    is 512 MB) and each query costs `N x d` multiply-adds; a request uses
    `batch x min(N, chunk_size)` floats of scratch memory.

    Args:
        model: A built Keras embedding model (one image input, one output).
        base_dir: TF Serving's `--model_base_path`.
        gallery_images: Gallery images: an array of model-ready images
            `(N, H, W, C)`, a list / array of encoded image bytes (decoded with
            `preprocessing`), or a `tf.data.Dataset` of such images or of
            `(images, labels)`. Embedded with the exported network itself.
        gallery_embeddings: Instead of images, gallery embeddings `(N, d)`
            (L2-normalised here).
        gallery_labels: Labels `(N,)`, integers or strings. Required unless
            `gallery_images` is a dataset yielding `(images, labels)`.
            (`reference_images=`, `reference_embeddings=` and `reference_labels=`
            are the deprecated names of these three.)
        k: Neighbours returned per query, at most N. Defaults to 10.
        version, input_format, preprocessing, overwrite: As in `export_embedder`.
        warmup, warmup_batch_sizes, warmup_inputs, run_info, verify: As in
            `export_embedder`.
        chunk_size: Gallery rows scored at once. Defaults to 32768.
        batch_size: Batch size for embedding `gallery_images`. Defaults to 256.
        threshold: A calibrated cosine-similarity threshold
            (`keras_dml.evaluation.calibrate`). When given, the signature also
            returns `match` (`(batch,)`: the nearest gallery item's label if its
            score is at or above the threshold, else -1, or "" for string
            labels) and `is_match` (bool `(batch,)`). Defaults to None.

    Returns:
        The version directory, `base_dir/<version>`.

    Raises:
        ValueError: Bad model, gallery, labels or arguments.
        FileExistsError: The version exists and `overwrite` is False.

    Examples:

    >>> export_retriever(model, "savedmodels/cub_search", gallery_images=paths_bytes,
    ...                  gallery_labels=labels, k=5,
    ...                  preprocessing=Preprocessing(image_size=227))  # doctest: +SKIP
    'savedmodels/cub_search/1'
    """
    backend.require_tensorflow_backend("the SavedModel export")
    serving = serving_input(model, input_format, preprocessing)
    embed, dim = embedding_fn(model, serving.image_spec, l2_normalize=True)
    embeddings, labels = embedded_gallery(embed, serving, gallery_images, gallery_embeddings,
                                          gallery_labels, batch_size)
    gallery = build_gallery(embeddings, labels, dim)
    search, retrieval = search_fn(gallery, k, chunk_size, threshold)

    def serve(inputs):
        return search(embed(serving.to_images(inputs)))

    return write_export(
        base_dir, serve, serving, kind="retriever", embedding_dim=dim,
        describe=OUTPUT_DESCRIPTIONS, run_info=run_info, version=version, overwrite=overwrite,
        warmup=warmup, warmup_batch_sizes=warmup_batch_sizes, warmup_inputs=warmup_inputs,
        verify=verify, sections={"retrieval": retrieval},
        model_fingerprint=model_fingerprint(model),
    )


@hyperparameters.renamed_keywords(reference="gallery")
def export_from_keras_file(keras_path, base_dir, *, kind="embedder", gallery=None, k=10,
                           chunk_size=32768, threshold=None, **kwargs):
    """Loads a `.keras` model and exports it for TF Serving (what `keras-dml export` runs).

    Args:
        keras_path: The saved `.keras` model.
        base_dir: TF Serving's `--model_base_path`.
        kind: `"embedder"` or `"retriever"`. Defaults to `"embedder"`.
        gallery: For the retriever, an `.npz` path (see `load_gallery_file`) or
            a dict of `export_retriever` gallery arguments. (`reference=` is its
            deprecated name.)
        k: Retriever neighbours per query. Defaults to 10.
        chunk_size: Retriever gallery chunk. Defaults to 32768.
        threshold: Retriever match threshold. Defaults to None (no decision).
        **kwargs: Passed on: `version`, `input_format`, `preprocessing`,
            `overwrite`, `warmup`, `warmup_batch_sizes`, `run_info`, `verify`.

    Returns:
        The version directory written.

    Examples:

    >>> export_from_keras_file("runs/cub.keras", "savedmodels/cub",
    ...                        preprocessing={"image_size": 227})  # doctest: +SKIP
    'savedmodels/cub/1'
    """
    backend.require_tensorflow_backend("the SavedModel export")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    if (kind == "retriever") != (gallery is not None):
        raise ValueError("gallery= is required for kind='retriever' and only used by it.")
    model = load_keras_model(keras_path)
    if kind == "embedder":
        return export_embedder(model, base_dir, **kwargs)
    if not isinstance(gallery, dict):
        gallery = load_gallery_file(gallery)
    return export_retriever(model, base_dir, k=k, chunk_size=chunk_size, threshold=threshold,
                            **gallery, **kwargs)


@hyperparameters.renamed_keywords(reference_embeddings="gallery_embeddings",
                                  reference_labels="gallery_labels")
def export_gallery(embedder_dir, base_dir, gallery_embeddings, gallery_labels, k=10, *,
                   threshold=None, version=None, overwrite=False, chunk_size=32768, warmup=True,
                   warmup_batch_sizes=(1,), run_info=None, verify=True):
    """A retriever version built on an existing embedder export, with a new gallery.

    The route for replacing a retriever's gallery (and threshold) without the
    Keras model: the embedder SavedModel at `embedder_dir` (a version
    directory written by `export_embedder`) is loaded with TensorFlow and
    reused as is, its signature, weights and `model_fingerprint` unchanged, and a new version of
    `base_dir` adds the gallery search (and decision) behind it. TF Serving
    picks up the new version while serving; the embedder export is untouched.

    Args:
        embedder_dir: An embedder version directory (holds `keras_dml_export.json`).
        base_dir: The retriever's model base path.
        gallery_embeddings, gallery_labels: The new gallery (e.g.
            `Index.embeddings` and `Index.labels`), embedded by that embedder.
            (`reference_embeddings=` and `reference_labels=` are their deprecated
            names.)
        k, threshold, chunk_size: As in `export_retriever`.
        version, overwrite, warmup, warmup_batch_sizes, run_info, verify: As in
            `export_embedder`.

    Returns:
        The version directory written.
    """
    embed, serving, dim = load_embedder_export(embedder_dir)
    gallery = build_gallery(gallery_embeddings, gallery_labels, dim)
    search, retrieval = search_fn(gallery, k, chunk_size, threshold)
    retrieval["embedder"] = str(embedder_dir)

    def serve(inputs):
        return search(embed(inputs))

    return write_export(
        base_dir, serve, serving, kind="retriever", embedding_dim=dim,
        describe=OUTPUT_DESCRIPTIONS, run_info=run_info, version=version, overwrite=overwrite,
        warmup=warmup, warmup_batch_sizes=warmup_batch_sizes, verify=verify,
        sections={"retrieval": retrieval},
        model_fingerprint=read_export_info(embedder_dir).get("model_fingerprint"),
    )
