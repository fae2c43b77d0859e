"""Step 4 of an export: the gallery and its in-graph exact search.

The gallery (L2-normalised embeddings and their labels) is stored in the
SavedModel's `variables/`, not in the graph proto, so it is not bound by the
2 GiB protobuf limit. Search is exact: cosine similarity (dot product of unit
vectors) against every gallery item, scanned in chunks of `chunk_size` rows with
a running top-k, so memory per request is `batch x chunk_size` scores whatever
the gallery size. With a calibrated `threshold` the search also returns the
match decision: the nearest gallery item's label when its score is at or above
the threshold, else the unknown label (-1, or "" for string labels).

Size limits: the server holds the gallery in RAM (`N x d x 4` bytes: 1M x 128
is 512 MB), and each query costs `N x d` multiply-adds (brute force, no
index); beyond a few million gallery items use an approximate index
(`keras_dml.index`) outside TF Serving.
"""

import dataclasses
import math

import numpy as np

from keras_dml import backend
from keras_dml.hyperparameters import integer_at_least

__all__ = ["OUTPUT_DESCRIPTIONS", "build_gallery", "chunked_top_k", "search_fn"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")


UNKNOWN_INT = -1
UNKNOWN_STRING = b""


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


@dataclasses.dataclass(frozen=True)
class Gallery:
    """A validated gallery: float32 unit-norm `embeddings` `(N, d)` and `labels` `(N,)`
    (int64, or an object array of bytes)."""

    embeddings: np.ndarray
    labels: np.ndarray

    def __len__(self):
        return len(self.embeddings)

    @property
    def unknown_label(self):
        return UNKNOWN_STRING if self.labels.dtype == object else UNKNOWN_INT


def build_gallery(embeddings, labels, dim):
    """A validated `Gallery`: embeddings `(N, d)` (L2-normalised here) and labels `(N,)`.

    Args:
        embeddings: float `(N, d)`, e.g. from `embed.gallery_embeddings`.
        labels: `(N,)` integers or strings.
        dim: The exported network's embedding size d.
    """
    embeddings = _check_embeddings(embeddings, dim)
    if labels is None:
        raise ValueError(
            "gallery_labels is required (or a gallery_images dataset of (images, labels))."
        )
    return Gallery(embeddings, _check_labels(labels, len(embeddings)))


def search_fn(gallery, k, chunk_size=32768, threshold=None):
    """`queries (B, d) -> dict of outputs`: exact top-k of `gallery`, and the decision.

    Outputs: `indices` (int64 `(B, k)`), `labels` (`(B, k)`), `scores`
    (float32 `(B, k)`), best first; with a `threshold` also `match` (`(B,)`,
    the top label or the unknown label) and `is_match` (bool `(B,)`).

    Returns:
        `(search, description)`: the function (it reads the gallery from
        variables) and the sidecar's `retrieval` section.
    """
    n = len(gallery)
    k = integer_at_least("k", k, 1, strict=True)
    chunk_size = integer_at_least("chunk_size", chunk_size, 1, strict=True)
    if k > n:
        raise ValueError(f"k={k} exceeds the number of gallery items ({n}).")
    if threshold is not None:
        threshold = float(threshold)
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be a finite similarity, got {threshold!r}.")
    gallery_var = tf.Variable(gallery.embeddings, trainable=False, name="gallery_embeddings")
    labels_var = tf.Variable(gallery.labels, trainable=False, name="gallery_labels")

    def search(queries):
        scores, indices = chunked_top_k(queries, tf.convert_to_tensor(gallery_var), k,
                                        chunk_size)
        labels = tf.gather(labels_var, indices)
        outputs = {"indices": tf.cast(indices, tf.int64), "labels": labels, "scores": scores}
        if threshold is not None:
            is_match = scores[:, 0] >= threshold
            outputs["is_match"] = is_match
            outputs["match"] = tf.where(is_match, labels[:, 0],
                                        tf.constant(gallery.unknown_label, labels_var.dtype))
        return outputs

    description = {
        "gallery_size": n,
        "k": k,
        "chunk_size": chunk_size,
        "num_chunks": math.ceil(n / chunk_size),
        "similarity": "cosine (dot product of L2-normalised embeddings)",
        "label_dtype": labels_var.dtype.name,
        "gallery_bytes": int(gallery.embeddings.nbytes),
        "threshold": threshold,
        "unknown_label": (gallery.unknown_label.decode()
                          if isinstance(gallery.unknown_label, bytes) else gallery.unknown_label),
    }
    return search, description


OUTPUT_DESCRIPTIONS = {
    "indices": "Rows of the gallery, most similar first.",
    "labels": "Labels of those gallery items.",
    "scores": "Cosine similarity of query and gallery item, in [-1, 1].",
    "match": "The nearest gallery item's label if its score is at or above the threshold, "
             "else the unknown label (-1, or \"\" for string labels).",
    "is_match": "Whether the nearest gallery item's score is at or above the threshold.",
}


def _check_embeddings(embeddings, dim):
    embeddings = np.asarray(embeddings)
    if embeddings.dtype.kind not in "fiu" or embeddings.ndim != 2:
        raise ValueError(
            f"gallery_embeddings must be a float array (N, d), got dtype "
            f"{embeddings.dtype} and shape {embeddings.shape}."
        )
    if embeddings.shape[1] != dim or len(embeddings) == 0:
        raise ValueError(
            f"gallery_embeddings must have shape (N >= 1, {dim}) to match the model's "
            f"embedding size, got {embeddings.shape}."
        )
    embeddings = embeddings.astype(np.float32)
    bad = ~np.isfinite(embeddings).all(axis=1)
    if bad.any():
        raise ValueError(
            f"gallery embeddings have NaN or Inf in {int(bad.sum())} rows "
            f"(first: row {int(np.argmax(bad))})."
        )
    norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError(
            f"gallery embedding row {int(np.argmax(norms[:, 0] == 0))} is all zeros: "
            "it has no direction to compare by cosine similarity."
        )
    return embeddings / norms


def _check_labels(labels, n):
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or len(labels) != n:
        raise ValueError(
            f"gallery_labels must have shape ({n},), one label per gallery item, got "
            f"{labels.shape}."
        )
    if labels.dtype.kind in "iu":
        return labels.astype(np.int64)
    if labels.dtype.kind == "f":
        if not np.all(np.isfinite(labels) & (labels == np.round(labels))):
            raise ValueError("gallery_labels must be integers or strings, got fractional "
                             "floats.")
        return labels.astype(np.int64)
    values = labels.tolist()
    if labels.dtype.kind in "USO" and all(isinstance(v, (str, bytes)) for v in values):
        return np.array([v.encode() if isinstance(v, str) else v for v in values], dtype=object)
    if labels.dtype.kind == "O" and all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return labels.astype(np.int64)
    raise ValueError(f"gallery_labels must be integers or strings, got dtype {labels.dtype}.")
