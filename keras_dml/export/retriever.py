"""`export_retriever`: embed a query and return its top-k gallery neighbours, in-graph.

The reference gallery (L2-normalised embeddings and their labels) is stored
in the SavedModel's `variables/`, not in the graph proto, so it is not bound
by the 2 GiB protobuf limit. Search is exact: cosine similarity (dot product
of unit vectors) against every reference, scanned in chunks of `chunk_size`
rows with a running top-k, so memory per request is
`batch x chunk_size` scores whatever the gallery size.

Size limits: the server holds the gallery in RAM (`N x d x 4` bytes: 1M x 128
is 512 MB), and each query costs `N x d` multiply-adds (brute force, no
index); beyond a few million references use an approximate index outside
TF Serving.
"""

import math

import numpy as np
import tensorflow as tf

from keras_dml.export.embedder import embedding_dim, embedding_fn
from keras_dml.export.inputs import decode_images, serving_input
from keras_dml.export.writer import write_export


def chunked_top_k(queries, gallery, k, chunk_size):
    """Exact top-k of `queries @ gallery.T`, scanning `gallery` in row chunks.

    Ties go to the lower gallery index, as a stable descending sort would.

    Args:
        queries: float `(B, d)`.
        gallery: float `(N, d)` with a static N.
        k: Neighbours per query, `1 <= k <= N`.
        chunk_size: Gallery rows scored at once.

    Returns:
        `(scores, indices)`: float `(B, k)` best first, int32 `(B, k)`.
    """
    n = int(gallery.shape[0])
    if n <= chunk_size:
        return tf.math.top_k(tf.matmul(queries, gallery, transpose_b=True), k)
    num_chunks = math.ceil(n / chunk_size)
    batch = tf.shape(queries)[0]

    def body(chunk, best_scores, best_indices):
        start = chunk * chunk_size
        rows = tf.minimum(chunk_size, n - start)
        scores = tf.matmul(queries, tf.slice(gallery, [start, 0], [rows, -1]), transpose_b=True)
        scores, indices = tf.math.top_k(scores, tf.minimum(k, rows))
        # Earlier (lower-index) candidates first: top_k keeps the first of equals.
        scores = tf.concat([best_scores, scores], axis=1)
        indices = tf.concat([best_indices, indices + start], axis=1)
        best_scores, position = tf.math.top_k(scores, k)
        return chunk + 1, best_scores, tf.gather(indices, position, batch_dims=1)

    initial = (
        tf.constant(0),
        tf.fill([batch, k], tf.constant(-np.inf, queries.dtype)),
        tf.fill([batch, k], tf.constant(-1, tf.int32)),
    )
    _, scores, indices = tf.while_loop(lambda chunk, *_: chunk < num_chunks, body, initial)
    return scores, indices


def export_retriever(model, base_dir, reference_images=None, reference_embeddings=None,
                     reference_labels=None, k=10, *, version=None, input_format="image_bytes",
                     preprocessing=None, overwrite=False, chunk_size=32768, batch_size=256,
                     warmup=True, warmup_batch_sizes=(1,), warmup_inputs=None, run_info=None,
                     verify=True):
    """Exports image retrieval for TF Serving as `base_dir/<version>`.

    Signature `serving_default`: the input of `export_embedder` (`image_bytes`
    or `images`), outputs `indices` (int64 `(batch, k)`, rows of the reference
    gallery), `labels` (`(batch, k)`, their labels: int64, or string for
    string labels) and `scores` (float32 `(batch, k)`, cosine similarity),
    best first. The gallery lives in the SavedModel, so TF Serving alone serves
    retrieval. Layout, warm-up, sidecar and publishing are as in
    `export_embedder`; the sidecar's `retrieval` section records the gallery.

    Size limits: the gallery takes `N x d x 4` bytes of server RAM (1M x 128
    is 512 MB) and each query costs `N x d` multiply-adds; a request uses
    `batch x min(N, chunk_size)` floats of scratch memory.

    Args:
        model: A built Keras embedding model (one image input, one output).
        base_dir: TF Serving's `--model_base_path`.
        reference_images: Gallery images: an array of model-ready images
            `(N, H, W, C)`, a list / array of encoded image bytes (decoded with
            `preprocessing`), or a `tf.data.Dataset` of such images or of
            `(images, labels)`. Embedded with the exported network itself.
        reference_embeddings: Instead of images, gallery embeddings `(N, d)`
            (L2-normalised here).
        reference_labels: Labels `(N,)`, integers or strings. Required unless
            `reference_images` is a dataset yielding `(images, labels)`.
        k: Neighbours returned per query, at most N. Defaults to 10.
        version, input_format, preprocessing, overwrite, warmup,
            warmup_batch_sizes, warmup_inputs, run_info, verify: As in
            `export_embedder`.
        chunk_size: Gallery rows scored at once. Defaults to 32768.
        batch_size: Batch size for embedding `reference_images`. Defaults to 256.

    Returns:
        The version directory, `base_dir/<version>`.

    Raises:
        ValueError: Bad model, gallery, labels or arguments.
        FileExistsError: The version exists and `overwrite` is False.

    Examples:

    >>> export_retriever(model, "savedmodels/cub_search", reference_images=paths_bytes,
    ...                  reference_labels=labels, k=5,
    ...                  preprocessing=Preprocessing(image_size=227))  # doctest: +SKIP
    'savedmodels/cub_search/1'
    """
    serving = serving_input(model, input_format, preprocessing)
    embed = embedding_fn(model, l2_normalize=True)
    dim = embedding_dim(model, embed, serving.image_spec)
    gallery, labels = reference_gallery(
        embed, serving, dim, reference_images, reference_embeddings, reference_labels,
        batch_size,
    )
    n = len(gallery)
    k = _positive_int(k, "k")
    chunk_size = _positive_int(chunk_size, "chunk_size")
    if k > n:
        raise ValueError(f"k={k} exceeds the number of references ({n}).")
    gallery_var = tf.Variable(gallery, trainable=False, name="reference_embeddings")
    labels_var = tf.Variable(labels, trainable=False, name="reference_labels")

    def serve(inputs):
        queries = embed(serving.to_images(inputs))
        scores, indices = chunked_top_k(queries, tf.convert_to_tensor(gallery_var), k,
                                        chunk_size)
        return {
            "indices": tf.cast(indices, tf.int64),
            "labels": tf.gather(labels_var, indices),
            "scores": scores,
        }

    retrieval = {
        "gallery_size": n,
        "k": k,
        "chunk_size": chunk_size,
        "num_chunks": math.ceil(n / chunk_size),
        "similarity": "cosine (dot product of L2-normalised embeddings)",
        "label_dtype": labels_var.dtype.name,
        "gallery_bytes": int(gallery.nbytes),
    }
    return write_export(
        base_dir, serve, serving, kind="retriever", embedding_dim=dim,
        describe={
            "indices": "Rows of the reference gallery, most similar first.",
            "labels": "Labels of those references.",
            "scores": "Cosine similarity of query and reference, in [-1, 1].",
        },
        run_info=run_info, version=version, overwrite=overwrite, warmup=warmup,
        warmup_batch_sizes=warmup_batch_sizes, warmup_inputs=warmup_inputs, verify=verify,
        sections={"retrieval": retrieval},
    )


def reference_gallery(embed, serving, dim, images=None, embeddings=None, labels=None,
                      batch_size=256):
    """Validated gallery: float32 unit-norm embeddings `(N, d)` and labels `(N,)`."""
    if (images is None) == (embeddings is None):
        raise ValueError("Pass exactly one of reference_images and reference_embeddings.")
    if embeddings is None:
        embeddings, found = _embed_references(embed, serving, images,
                                              _positive_int(batch_size, "batch_size"))
        if labels is None:
            labels = found
    embeddings = _check_embeddings(embeddings, dim)
    if labels is None:
        raise ValueError(
            "reference_labels is required (or a reference_images dataset of (images, labels))."
        )
    return embeddings, _check_labels(labels, len(embeddings))


def _embed_references(embed, serving, images, batch_size):
    if isinstance(images, tf.data.Dataset):
        batches = _dataset_batches(images, serving, batch_size)
    else:
        array = _as_array(images)
        batches = ((array[i:i + batch_size], None) for i in range(0, len(array), batch_size))
    to_images = tf.function(_gallery_input(serving))
    embed = tf.function(embed)
    chunks, labels = [], []
    for x, y in batches:
        chunks.append(embed(to_images(tf.convert_to_tensor(x))).numpy())
        if y is not None:
            labels.append(np.asarray(y))
    if not chunks:
        raise ValueError("reference_images is empty.")
    if labels and len(labels) != len(chunks):
        raise ValueError("The reference dataset yields labels for only some batches.")
    return np.concatenate(chunks), np.concatenate(labels) if labels else None


def _as_array(images):
    """Images as an array; encoded images as an object array (NumPy's fixed-width
    byte strings would drop trailing zero bytes)."""
    if isinstance(images, (list, tuple)) and images and isinstance(images[0], (bytes, str)):
        return np.array(images, dtype=object)
    return np.asarray(images)


def _dataset_batches(dataset, serving, batch_size):
    spec = dataset.element_spec
    has_labels = isinstance(spec, tuple)
    image_spec = spec[0] if has_labels else spec
    if has_labels and len(spec) != 2:
        raise ValueError(
            f"A reference dataset must yield images or (images, labels), got {spec}."
        )
    single_rank = 0 if image_spec.dtype == tf.string else 3
    if image_spec.shape.rank == single_rank:
        dataset = dataset.batch(batch_size)
    for element in dataset.as_numpy_iterator():
        yield element if has_labels else (element, None)


def _gallery_input(serving):
    """Maps a gallery batch (encoded bytes or model-ready images) to model input."""
    image_spec = serving.image_spec

    def to_images(x):
        if x.dtype == tf.string:
            if serving.preprocessing is None:
                raise ValueError("Encoded reference images need preprocessing= to decode them.")
            return decode_images(x, serving.preprocessing, image_spec.dtype)
        expected = tuple(image_spec.shape[1:])
        if x.shape.rank != 4 or any(e is not None and e != a
                                    for e, a in zip(expected, x.shape[1:])):
            raise ValueError(
                f"reference_images must have shape (N, {', '.join(map(str, expected))}), "
                f"got a batch of shape {tuple(x.shape)}."
            )
        return tf.cast(x, image_spec.dtype)

    return to_images


def _check_embeddings(embeddings, dim):
    embeddings = np.asarray(embeddings)
    if embeddings.dtype.kind not in "fiu" or embeddings.ndim != 2:
        raise ValueError(
            f"reference_embeddings must be a float array (N, d), got dtype "
            f"{embeddings.dtype} and shape {embeddings.shape}."
        )
    if embeddings.shape[1] != dim or len(embeddings) == 0:
        raise ValueError(
            f"reference_embeddings must have shape (N >= 1, {dim}) to match the model's "
            f"embedding size, got {embeddings.shape}."
        )
    embeddings = embeddings.astype(np.float32)
    bad = ~np.isfinite(embeddings).all(axis=1)
    if bad.any():
        raise ValueError(
            f"reference embeddings have NaN or Inf in {int(bad.sum())} rows "
            f"(first: row {int(np.argmax(bad))})."
        )
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(
            f"reference embedding row {int(np.argmax(norms[:, 0] == 0))} is all zeros: "
            "it has no direction to compare by cosine similarity."
        )
    return embeddings / norms


def _check_labels(labels, n):
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or len(labels) != n:
        raise ValueError(
            f"reference_labels must have shape ({n},), one label per reference, got "
            f"{labels.shape}."
        )
    if labels.dtype.kind in "iu":
        return labels.astype(np.int64)
    if labels.dtype.kind == "f":
        if not np.all(np.isfinite(labels) & (labels == np.round(labels))):
            raise ValueError("reference_labels must be integers or strings, got fractional "
                             "floats.")
        return labels.astype(np.int64)
    values = labels.tolist()
    if labels.dtype.kind in "USO" and all(isinstance(v, (str, bytes)) for v in values):
        return np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)
    if labels.dtype.kind == "O" and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return labels.astype(np.int64)
    raise ValueError(f"reference_labels must be integers or strings, got dtype {labels.dtype}.")


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")
    return int(value)
