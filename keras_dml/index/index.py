"""`Index`: a searchable, savable gallery of embeddings with labels, ids and metadata."""

import dataclasses

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.index import backends, provenance, storage

METRICS = validation.SEARCH_METRICS
UNKNOWN_INT = -1
UNKNOWN_STRING = ""


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """The k nearest gallery items of each query, best first.

    Attributes:
        ids: int64 `(queries, k)` item ids.
        scores: float32 `(queries, k)` similarities, higher is closer (cosine
            similarity, inner product, or minus the squared Euclidean distance).
        labels: `(queries, k)` labels (int64, or str for string labels).
        metadata: `queries` lists of k metadata values (None where none was given).
    """

    ids: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    metadata: list


class Index:
    """A gallery of embeddings to search by similarity, save and load.

    Items are added with `add` (any number of times) and removed by id; each
    has an int64 id (running integers by default), a label (int or str;
    unknown: -1 or "") and optional JSON metadata. `search` finds the k most
    similar items of each query. The `"exact"` backend scores every item with
    the evaluation's exact kNN kernels (`keras_dml.evaluation.nearest_neighbors`):
    faiss' flat index where faiss is installed and TensorFlow sees no GPU, else
    TensorFlow's chunked kernel (bounded memory, on the GPU when there is one),
    both ranking equal scores by insertion order; `"faiss_ivf"` and `"faiss_hnsw"` are
    approximate (`pip install "keras_dml[ann]"`) and report their recall on
    your data with `recall_vs_exact`. `save` writes NumPy and JSON files (no
    pickle: a saved index is data, not code); `Index.load` reads them.

    Args:
        metric: `"cosine"` (default), `"dot"` or `"euclidean"`.
        backend: `"exact"` (default), `"faiss_ivf"` or `"faiss_hnsw"`.
        info: A JSON dict saved with the index (e.g. where its embeddings come
            from). Defaults to None (empty).
        provenance: What made the embeddings, a JSON dict: `model_fingerprint`
            (`keras_dml.index.model_fingerprint`), `preprocessing`, `run`.
            Saved with the index; `check_model` compares a model against it.
            Defaults to None (unknown).
        **backend_options: For `"exact"`: `kernel`, `"auto"` (default),
            `"faiss"` or `"tensorflow"`. For `"faiss_ivf"`: `nlist` (default ~4 sqrt(N)),
            `nprobe` (default 16); for `"faiss_hnsw"`: `m` (default 32),
            `ef_search` (default 64), `ef_construction` (default 80).

    Examples:

    >>> index = Index()
    >>> index.add(np.eye(3, dtype="float32"), labels=[7, 8, 9])  # returns the new ids
    array([0, 1, 2])
    >>> index.search(np.array([[1.0, 0.1, 0.0]], "float32"), k=2).labels
    array([[7, 8]])
    >>> index.match(np.array([[1.0, 0.1, 0.0], [1, 1, 1]], "float32"), threshold=0.9)
    array([ 7, -1])
    """

    def __new__(cls, metric="cosine", backend="exact", info=None, **options):
        if backend == "milvus":  # stop-gap until the store seam lands (keras_dml.index.milvus)
            from keras_dml.index.milvus import MilvusIndex

            return MilvusIndex.create(metric, info=info, **options)
        return super().__new__(cls)

    @classmethod
    def open(cls, uri, collection=None, token=None):
        """Reopens the Milvus collection at `uri` (a Milvus Lite folder or a server).

        Raises:
            FileNotFoundError: `uri` holds no such collection.
        """
        from keras_dml.index.milvus import MilvusIndex

        return MilvusIndex.open(uri, collection, token)

    def __init__(self, metric="cosine", backend="exact", info=None, *, provenance=None,
                 **backend_options):
        self.metric = validation.check_search_metric(metric)
        self.info = storage.check_info(info)
        self._provenance = storage.check_info(provenance)
        self._backend = backends.make(backend, metric, backend_options)
        self._chunks = []  # embeddings added since the last consolidation
        self._embeddings = None
        self._ids = np.zeros([0], np.int64)
        self._labels = None
        self._metadata = []
        self._next_id = 0

    # -- contents ------------------------------------------------------------------------

    @property
    def backend(self):
        return self._backend.name

    @property
    def dim(self):
        """The embedding size, or None while the index is empty."""
        embeddings = self.embeddings
        return None if embeddings is None else embeddings.shape[1]

    @property
    def embeddings(self):
        """float32 `(N, d)` embeddings in insertion order (None before the first add)."""
        if self._chunks:
            parts = ([] if self._embeddings is None else [self._embeddings]) + self._chunks
            self._embeddings = parts[0] if len(parts) == 1 else np.concatenate(parts)
            self._chunks = []
        return self._embeddings

    @property
    def ids(self):
        return self._ids.copy()

    @property
    def provenance(self):
        """What made the embeddings: `model_fingerprint`, `preprocessing` and `run` (None
        where unknown), `dim` and `metric`."""
        return {"model_fingerprint": None, "preprocessing": None, "run": None,
                **self._provenance, "dim": self.dim, "metric": self.metric}

    def check_model(self, fingerprint, allow_mismatch=False, run=None):
        """Refuses a model whose `fingerprint` is not the one that built the index.

        Returns None when they agree or the index records none; with
        `allow_mismatch=True` returns the mismatch message instead of raising.

        Raises:
            ModelMismatchError: The fingerprints differ (both named, and the runs).
        """
        return provenance.check_model(self.provenance, fingerprint, allow_mismatch, run)

    @property
    def labels(self):
        return None if self._labels is None else self._labels.copy()

    @property
    def metadata(self):
        return list(self._metadata)

    def __len__(self):
        return len(self._ids)

    def __repr__(self):
        return (f"Index(metric={self.metric!r}, backend={self.backend!r}, size={len(self)}, "
                f"dim={self.dim})")

    def add(self, embeddings, labels=None, ids=None, metadata=None):
        """Adds items; returns their ids (int64).

        Args:
            embeddings: float `(n, d)`, finite; d must match earlier adds.
            labels: `(n,)` ints or strings (one kind per index). Defaults to
                None: unknown (-1, or "" in an index of string labels).
            ids: `(n,)` distinct ints not in the index. Defaults to None:
                running integers after the largest id used so far.
            metadata: A list of n JSON-serialisable values. Defaults to None.
        """
        embeddings = validation.embedding_array(embeddings, "embeddings")
        n = len(embeddings)
        if self.dim is not None and embeddings.shape[1] != self.dim:
            raise ValueError(f"embeddings have dimension {embeddings.shape[1]} but the index "
                             f"holds dimension {self.dim}.")
        labels = self._check_labels(labels, n)
        ids = self._check_ids(ids, n)
        metadata = storage.check_metadata(metadata, n)
        self._chunks.append(embeddings.copy())  # later changes to the caller's array stay out
        self._ids = np.concatenate([self._ids, ids])
        self._labels = labels if self._labels is None else np.concatenate([self._labels, labels])
        self._metadata.extend(metadata)
        self._next_id = max(self._next_id, int(ids.max()) + 1)
        self._backend.invalidate()
        return ids

    def remove(self, ids):
        """Removes the items with these ids; an unknown id is a `KeyError`."""
        ids = np.atleast_1d(np.asarray(ids))
        if ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be integers, got dtype {ids.dtype}.")
        missing = np.setdiff1d(ids, self._ids)
        if missing.size:
            raise KeyError(f"ids not in the index: {missing[:5].tolist()}"
                           + (" ..." if missing.size > 5 else ""))
        keep = ~np.isin(self._ids, ids)
        self._embeddings = self.embeddings[keep]
        self._ids = self._ids[keep]
        self._labels = self._labels[keep]
        self._metadata = [m for m, k in zip(self._metadata, keep) if k]
        self._backend.invalidate()

    # -- search --------------------------------------------------------------------------

    def search(self, queries, k=1):
        """The k most similar items of each query (`SearchResult`, best first).

        Ties between bitwise-equal scores go to the item added first (exact
        backend; the TensorFlow kernel scores the gallery in blocks of 2**18
        rows, and copies of one vector in different blocks may score one float
        rounding apart).
        """
        positions, scores = self._positions(queries, k)
        return self._result(positions, scores)

    def match(self, queries, threshold):
        """Open-set decision per query: the nearest item's label if its score is at
        or above `threshold`, else -1 (or "" for string labels).

        `threshold` is a similarity (e.g. from `keras_dml.evaluation.calibrate`).
        """
        threshold = float(threshold)
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite similarity, got {threshold!r}.")
        positions, scores = self._positions(queries, 1)
        unknown = UNKNOWN_STRING if self._labels.dtype.kind == "U" else UNKNOWN_INT
        return np.where(scores[:, 0] >= threshold, self._labels[positions[:, 0]], unknown)

    def recall_vs_exact(self, queries, k=10):
        """Mean fraction of the exact top-k ids that this index's search returns.

        1.0 for the exact backend; for an approximate one, its recall@k on
        `queries` (your data), the figure to tune `nprobe` / `ef_search` by.
        """
        positions, _ = self._positions(queries, k)
        exact, _ = backends.Exact(self.metric).search(self.embeddings, self._queries(queries), k)
        found = [np.intersect1d(a, b).size for a, b in zip(positions, exact)]
        return float(np.mean(found) / k)

    def _queries(self, queries):
        queries = validation.embedding_array(queries, "queries")
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries have dimension {queries.shape[1]} but the index holds "
                             f"dimension {self.dim}.")
        return queries

    def _positions(self, queries, k):
        if not len(self):
            raise ValueError("The index is empty: add embeddings before searching.")
        k = hyperparameters.integer_at_least("k", k, 1)
        if k > len(self):
            raise ValueError(f"k={k} exceeds the {len(self)} items in the index.")
        return self._backend.search(self.embeddings, self._queries(queries), k)

    def _result(self, positions, scores):
        metadata = [[self._metadata[p] for p in row] for row in positions.tolist()]
        return SearchResult(ids=self._ids[positions], scores=scores.astype(np.float32),
                            labels=self._labels[positions], metadata=metadata)

    # -- checks --------------------------------------------------------------------------

    def _check_labels(self, labels, n):
        string_index = self._labels is not None and self._labels.dtype.kind == "U"
        if labels is None:
            return np.full(n, UNKNOWN_STRING if string_index else UNKNOWN_INT,
                           dtype=str if string_index else np.int64)
        labels = validation.label_array(labels, n, "labels")
        if labels.dtype.kind == "f":
            if not np.all(labels == np.round(labels)):
                raise ValueError("labels must be integers or strings, got fractional floats.")
            labels = labels.astype(np.int64)
        if labels.dtype.kind == "S":
            labels = labels.astype(str)
        if labels.dtype.kind not in "iuU":
            raise ValueError(f"labels must be integers or strings, got dtype {labels.dtype}.")
        if self._labels is not None and (labels.dtype.kind == "U") != string_index:
            kind = "string" if string_index else "integer"
            raise ValueError(f"The index holds {kind} labels; got labels of dtype {labels.dtype}.")
        return labels if labels.dtype.kind == "U" else labels.astype(np.int64)

    def _check_ids(self, ids, n):
        if ids is None:
            return np.arange(self._next_id, self._next_id + n, dtype=np.int64)
        ids = np.asarray(ids)
        if ids.shape != (n,) or ids.dtype.kind not in "iu":
            raise ValueError(f"ids must be {n} integers, one per embedding, got dtype "
                             f"{ids.dtype} and shape {ids.shape}.")
        ids = ids.astype(np.int64)
        if np.unique(ids).size != n:
            raise ValueError("ids must be distinct; got repeated ids.")
        taken = np.intersect1d(ids, self._ids)
        if taken.size:
            raise ValueError(f"ids already in the index: {taken[:5].tolist()}; remove them first.")
        return ids

    # -- persistence ---------------------------------------------------------------------

    def save(self, path, overwrite=False):
        """Writes the index to the directory `path` (NumPy + JSON files, no pickle).

        An existing index directory is replaced only with `overwrite=True`.
        """
        storage.save(path, {
            "metric": self.metric,
            "backend": self.backend,
            "backend_options": self._backend.options,
            "next_id": self._next_id,
            "info": storage.check_info(self.info),
            "provenance": self._provenance,
        }, self.embeddings, self._ids, self._labels, self._metadata, overwrite)
        return str(path)

    @classmethod
    def load(cls, path, backend=None, **backend_options):
        """Reads an index written by `save` (optionally with another backend)."""
        config, embeddings, ids, labels, metadata = storage.load(path)
        options = config["backend_options"] if backend is None else backend_options
        index = cls(config["metric"], backend or config["backend"], info=config.get("info"),
                    provenance=config.get("provenance"), **options)
        if embeddings is not None:
            index.add(embeddings, labels=labels, ids=ids, metadata=metadata)
        index._next_id = max(index._next_id, int(config["next_id"]))
        return index

    @classmethod
    def from_model(cls, embedder, dataset, metric="cosine", backend="exact", batch_size=256,
                   verbose=1, info=None, metadata=None, preprocessing=None, **backend_options):
        """An index of `dataset` embedded by `embedder`, with a progress bar.

        Args:
            embedder: A Keras model (or callable) mapping an image batch to
                `(batch, d)` embeddings, run in inference mode.
            dataset: What to embed: a `LabeledImages` split (e.g.
                `keras_dml.datasets.from_directory(root).test`; labels: its
                class names), image files `(paths, labels)`, an `(x, y)` tuple
                of arrays, or a `tf.data.Dataset` of `(x, y)` or `x` batches
                (e.g. `keras_dml.data.evaluation_batches`).
            metric, backend, info, backend_options: As in `Index`.
            batch_size: Batch size for splits, files and arrays. Defaults to 256.
            verbose: 1 shows a progress bar. Defaults to 1.
            metadata: A list of one JSON value per image. Defaults to None: the
                image paths of a file-based split or of `(paths, labels)`, else
                none.
            preprocessing: The `keras_dml.data.Preprocessing` of image files.
                Defaults to None: as `keras-dml train` prepares files for the
                embedder's input size (resize 256, centre crop, [0, 1]).

        Examples:

        >>> splits = keras_dml.datasets.from_directory("photos")  # doctest: +SKIP
        >>> index = Index.from_model(model.embedder(), splits.test)  # doctest: +SKIP
        >>> index.search(queries, k=3).metadata[0]  # doctest: +SKIP
        """
        from keras_dml.index.embedding import embed_source

        from keras_dml.index.provenance import model_fingerprint

        embeddings, labels, paths = embed_source(embedder, dataset, batch_size, verbose,
                                                 preprocessing)
        made = {"preprocessing": None if preprocessing is None else preprocessing.to_dict()}
        if hasattr(embedder, "weights"):
            made["model_fingerprint"] = model_fingerprint(embedder)
        index = cls(metric, backend, info=info, provenance=made, **backend_options)
        index.add(embeddings, labels=labels, metadata=paths if metadata is None else metadata)
        return index
