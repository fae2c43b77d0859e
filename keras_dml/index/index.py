"""`Index`: a searchable, savable gallery of embeddings with labels, ids and metadata.

`Index` is a facade: it checks what goes in and defines what comes out (ids,
labels, metadata, scores, `match`, `recall_vs_exact`, provenance), and keeps
the items in a store: `keras_dml.index.memory.MemoryStore` (NumPy arrays,
exact or faiss search) or `keras_dml.index.milvus.MilvusStore` (a Milvus
collection in a Lite file or on a server).
"""

import time

import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.index import filters, provenance, records, storage
from keras_dml.index.memory import MemoryStore
from keras_dml.index.results import SearchResult

__all__ = ["Index", "METRICS", "SearchResult"]

METRICS = validation.SEARCH_METRICS
UNKNOWN_INT = -1
UNKNOWN_STRING = ""
DEFAULT_URI = "keras_dml.db"  # the Milvus Lite file of backend="milvus" without a uri


class Index:
    """A gallery of embeddings to search by similarity, save and load.

    Items are added with `add` (any number of times), replaced with `upsert`
    and removed by id; each has an id (int or str, one kind per index; running
    integers by default), a label (int or str; unknown: -1 or ""), optional
    JSON metadata and the time it was added. `search` finds the k most similar
    items of each query, optionally among those passing a `filter`
    (`keras_dml.index.filters`: by label, id, time added or metadata field).

    Backends: `"exact"` scores every item with the evaluation's exact kNN
    search (`keras_dml.evaluation.nearest_neighbors`; its `kernel` option: NumPy,
    TensorFlow or faiss' flat index, by default faiss where installed, else
    TensorFlow's on the TensorFlow backend, else NumPy), equal scores ranked by
    insertion order; `"faiss_ivf"` and
    `"faiss_hnsw"` are approximate (`pip install "keras_dml[ann]"`); these
    three hold the items in memory, and `save` / `Index.load` write and read
    them as NumPy and JSON files (no pickle). `"milvus"` keeps them in a Milvus
    collection (`pip install "keras_dml[milvus]"`): an embedded Milvus Lite
    file (`uri="catalogue.db"`, the default `keras_dml.db`) or a Milvus server
    or cluster (`uri="http://host:19530"`, `token=...`), reopened from another
    process with `Index.open(uri)`; index type FLAT (exact), HNSW or IVF_FLAT.
    `recall_vs_exact` reports an approximate index's recall on your data.
    Scores are the same similarity on every backend, so thresholds from
    `keras_dml.evaluation.calibrate` apply unchanged.

    Every index records its `provenance` (the model's fingerprint and
    preprocessing, dimension, metric, run); reopening a collection with
    another model's provenance, or `check_model` with another model, raises
    `ModelMismatchError` naming both, unless `allow_mismatch=True`.

    Args:
        metric: `"cosine"` (default), `"dot"` or `"euclidean"`.
        backend: `"exact"` (default), `"faiss_ivf"`, `"faiss_hnsw"` or `"milvus"`.
        info: A JSON dict saved with the index (e.g. where its embeddings come
            from). Defaults to None (empty; an existing collection's).
        uri: Milvus only: a Lite file path ending in `.db` or an `http(s)://`
            server URI. Defaults to None: `keras_dml.db` in the current folder.
        token: Milvus only: the server's token (`"user:password"` or an API key).
        collection: Milvus only: the collection name. Defaults to `"keras_dml"`.
            An existing collection is opened (its metric and index options must
            agree with those given), a new one created at the first `add`.
        provenance: What made the embeddings (see `provenance`): at least
            `model_fingerprint` (`keras_dml.index.model_fingerprint(model)`);
            `from_model` fills it in. Defaults to None (unknown).
        allow_mismatch: Open a collection whose recorded model differs from
            `provenance` with a warning instead of an error. Defaults to False.
        **backend_options: For `"exact"`: `kernel`, `"auto"` (default),
            `"numpy"`, `"tensorflow"` or `"faiss"`. For `"faiss_ivf"`: `nlist` (default ~4 sqrt(N)),
            `nprobe` (default 16); for `"faiss_hnsw"`: `m` (default 32),
            `ef_search` (default 64), `ef_construction` (default 80). For
            `"milvus"`: `index_type` `"FLAT"` (default), `"HNSW"` (`m` 32,
            `ef_construction` 80, `ef_search` 64) or `"IVF_FLAT"` (`nlist` 128,
            `nprobe` 16), `timeout` (seconds to reach a server, default 10), `call_timeout`
            (seconds any one call to Milvus may take, default None: no bound), and
            `lite_process` (default False): serve a Lite file from a child
            process, whose memory then holds the collection instead of this
            one's (`keras_dml.index.lite_process`; `keras-dml index --uri`
            does).

    Examples:

    >>> index = Index()
    >>> index.add(np.eye(3, dtype="float32"), labels=[7, 8, 9])  # returns the new ids
    array([0, 1, 2])
    >>> index.search(np.array([[1.0, 0.1, 0.0]], "float32"), k=2).labels
    array([[7, 8]])
    >>> index.search(np.array([[1.0, 0.1, 0.0]], "float32"), k=2, filter={"label": [8, 9]}).ids
    array([[1, 2]])
    >>> index.match(np.array([[1.0, 0.1, 0.0], [1, 1, 1]], "float32"), threshold=0.9)
    array([ 7, -1])
    """

    def __init__(self, metric="cosine", backend="exact", info=None, *, uri=None, token=None,
                 collection=None, provenance=None, allow_mismatch=False, **backend_options):
        self.metric = validation.check_search_metric(metric)
        given = records.check_provenance(provenance, self.metric)
        if backend == "milvus":
            from keras_dml.index.milvus import TIMEOUT, MilvusStore

            timeout = backend_options.pop("timeout", TIMEOUT)
            lite_process = bool(backend_options.pop("lite_process", False))
            call_timeout = backend_options.pop("call_timeout", None)
            self._store = MilvusStore(DEFAULT_URI if uri is None else uri, collection, token,
                                      timeout, lite_process, call_timeout)
            try:
                self._record = records.open_collection(self._store, self.metric,
                                                       backend_options, info, given,
                                                       allow_mismatch)
            except BaseException:
                self._store.close()
                raise
        else:
            for name, value in (("uri", uri), ("token", token), ("collection", collection)):
                if value is not None:
                    raise ValueError(f"{name}= is for backend='milvus'; backend {backend!r} "
                                     "keeps the index in memory.")
            self._store = MemoryStore(self.metric, backend, backend_options)
            self._record = records.new_record(self.metric, self._store.options, info, given)
        self._store.record = self._record
        if info is not None:
            self._write_record()  # an existing collection keeps the new info

    @classmethod
    def open(cls, uri, collection=None, token=None, provenance=None, allow_mismatch=False,
             **options):
        """Reopens an existing Milvus collection (a Lite file or a server URI) with
        its recorded metric and index options.

        Args:
            uri, collection, token: As in `Index`.
            provenance, allow_mismatch: As in `Index`: the model at hand, checked
                against the collection's record.
            **options: Search options to change (`ef_search` for HNSW, `nprobe`
                for IVF_FLAT) and `timeout`.

        Raises:
            FileNotFoundError: No such Lite file or collection (the message lists
                the collections there).
        """
        from keras_dml.index.milvus import DEFAULT_COLLECTION, read_record

        name = collection or DEFAULT_COLLECTION
        record = read_record(uri, name, token, options.get("timeout"))
        return cls(record["metric"], "milvus", uri=uri, token=token, collection=name,
                   provenance=provenance, allow_mismatch=allow_mismatch, **options)

    def close(self):
        """Releases the store (a Milvus Lite file: so another process can open it)."""
        self._store.close()

    def flush(self):
        """Seals what was written to a Milvus collection (searches then take Milvus' fast
        path); nothing to do in memory."""
        getattr(self._store, "flush", lambda: None)()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- contents ------------------------------------------------------------------------

    @property
    def backend(self):
        return self._store.name

    @property
    def options(self):
        """The backend's options (in memory), or the Milvus index type and its options."""
        return dict(self._record["options"])

    @property
    def info(self):
        """The JSON dict saved with the index."""
        return self._record["info"]

    @info.setter
    def info(self, value):
        self._record["info"] = storage.check_info(value)
        self._write_record()

    @property
    def provenance(self):
        """What made the embeddings: `model_fingerprint`, `preprocessing`, `dim`,
        `metric` and `run` (None where unknown)."""
        return dict(self._record["provenance"])

    @property
    def metadata_fields(self):
        """`{field: type}` of dict metadata: "integer", "number", "string", "boolean",
        "array", "object", or None while the field has held only nulls."""
        return records.metadata_fields(self._record)

    @property
    def dim(self):
        """The embedding size, or None before the first add."""
        return self._record["provenance"]["dim"]

    @property
    def embeddings(self):
        """float32 `(N, d)` embeddings (None while empty). On Milvus this reads the
        whole collection; in memory it is in insertion order."""
        return self._arrays(("vector",))[0]

    @property
    def ids(self):
        """Every id, in the order of `embeddings`."""
        ids = self._arrays(())[1]
        return np.zeros([0], np.int64) if ids is None else ids.copy()

    @property
    def labels(self):
        labels = self._arrays(("label",))[2]
        return None if labels is None else labels.copy()

    @property
    def metadata(self):
        return list(self._arrays(("metadata",))[3] or [])

    def _arrays(self, fields=("vector", "label", "metadata")):
        return self._store.arrays(fields)

    def contains(self, ids):
        """A boolean per id: whether the index holds it."""
        return self._store.contains(self._id_array(ids))

    def __len__(self):
        return self._store.count()

    def __repr__(self):
        return (f"Index(metric={self.metric!r}, backend={self.backend!r}, size={len(self)}, "
                f"dim={self.dim})")

    def add(self, embeddings, labels=None, ids=None, metadata=None):
        """Adds items; returns their ids.

        Args:
            embeddings: float `(n, d)`, finite; d must match the index.
            labels: `(n,)` ints or strings (one kind per index). Defaults to
                None: unknown (-1, or "" in an index of string labels).
            ids: `(n,)` distinct ints or strings (one kind per index) not in the
                index. Defaults to None: running integers after the largest id
                used so far (an index of string ids needs them given).
            metadata: A list of n JSON-serialisable values. Dicts' keys become
                the index's fields (`metadata_fields`) at the first add that has
                them; later keys must be among them, with values of their type
                (a left-out key is null). Defaults to None.

        Raises:
            ValueError: Another dimension, a kind of ids or labels the index
                does not hold, repeated ids, ids already in the index (use
                `upsert` to replace them), or a metadata key or type the index's
                fields do not have (see `keras_dml.index.records`).
        """
        return self._write(embeddings, labels, ids, metadata, replace=False)

    def upsert(self, embeddings, labels=None, ids=None, metadata=None):
        """Adds items, replacing those whose ids are already in the index; returns
        the ids. Arguments as in `add`, but `ids` are required."""
        if ids is None:
            raise ValueError("upsert needs ids: the items to add or replace.")
        return self._write(embeddings, labels, ids, metadata, replace=True)

    def _write(self, embeddings, labels, ids, metadata, replace, added=None):
        embeddings = validation.embedding_array(embeddings, "embeddings")
        n = len(embeddings)
        if self.dim is not None and embeddings.shape[1] != self.dim:
            raise ValueError(f"embeddings have dimension {embeddings.shape[1]} but the index "
                             f"holds dimension {self.dim}.")
        labels = self._check_labels(labels, n)
        ids = self._check_ids(ids, n, replace)
        metadata = storage.check_metadata(metadata, n)
        records.check_metadata_fields(self._record, metadata, strict=added is None)
        added = np.full(n, time.time()) if added is None else np.asarray(added, np.float64)
        record = self._record
        record["provenance"]["dim"] = int(embeddings.shape[1])
        record["id_kind"] = storage.kind_of(ids)
        record["label_kind"] = storage.kind_of(labels)
        if ids.dtype.kind != "U" and n:
            record["next_id"] = max(record["next_id"], int(ids.max()) + 1)
        self._store.insert(embeddings, ids, labels, metadata, added, replace)
        return ids

    def remove(self, ids):
        """Removes the items with these ids; an id not in the index is a `KeyError`
        and nothing is removed."""
        ids = self._id_array(ids)
        self._require(ids)
        self._store.delete(ids)

    def get_embeddings(self, ids):
        """float32 `(n, d)` embeddings of these ids, in their order (`KeyError` for
        an id not in the index)."""
        ids = self._id_array(ids)
        self._require(ids)
        return self._store.get(ids)

    def _require(self, ids):
        missing = ids[~self._store.contains(ids)]
        if missing.size:
            raise KeyError(f"ids not in the index: {missing[:5].tolist()}"
                           + (" ..." if missing.size > 5 else ""))

    # -- search --------------------------------------------------------------------------

    def search(self, queries, k=1, filter=None, rerank=None):
        """The k most similar items of each query (`SearchResult`, best first).

        Args:
            queries: float `(Q, d)`.
            k: Items per query; at most the index size.
            filter: Search only the items passing it: a dict (see
                `keras_dml.index.filters`, e.g. `{"label": ["cat", "dog"]}`,
                `{"added": {">": datetime(2026, 1, 1)}}`, `{"year": {">=": 2020}}`)
                or, on Milvus, a Milvus expression string. With a filter, k is
                capped at the number of passing items. Defaults to None.
            rerank: Re-rank the top candidates (`keras_dml.index.rerank`): `"qe"`,
                `"dba"`, `"k_reciprocal"`, with options as `"qe:n=2,alpha=3"`, or a
                re-ranker object; `scores` are then the re-ranker's and
                `similarities` the items' similarities to the queries. Defaults
                to None: the plain search.

        Ties between equal scores go to the item added first on the in-memory
        backends (copies of one vector score alike); Milvus orders them its own way.

        Raises:
            ValueError: An empty index, k above its size, queries of another
                dimension, or a filter naming an unknown field.
        """
        if self.dim is None:  # nothing was ever added
            raise ValueError(storage.EMPTY)
        k = hyperparameters.integer_at_least("k", k, 1)
        queries = self._queries(queries)
        if rerank is not None:
            from keras_dml.index.rerank import rerank_search

            return SearchResult(*rerank_search(self, queries, k, filter, rerank))
        selection = self._selection(filter)
        if self.backend == "milvus":  # the store checks k without counting the collection
            return SearchResult(*self._store.search(queries, k, selection))
        size = len(self)
        if not size:
            raise ValueError(storage.EMPTY)
        if k > size:
            raise ValueError(storage.exceeds(k, size))
        return SearchResult(*self._store.search(queries, k, selection))

    def _selection(self, filter):
        """The filter as the store takes it: conditions in memory, an expression on Milvus."""
        if filter is None:
            return None
        if isinstance(filter, str):
            if self.backend != "milvus":
                raise ValueError("A filter string is a Milvus expression, for backend='milvus'; "
                                 "in memory write it as a dict, e.g. {'label': ['cat']}.")
            return filter
        record = self._record
        conditions = filters.parse(filter, record["metadata_fields"],
                                   {"id": record["id_kind"], "label": record["label_kind"]})
        if self.backend == "milvus":
            return filters.milvus_expression(conditions)
        return conditions

    def match(self, queries, threshold, filter=None):
        """Open-set decision per query: the nearest item's label if its score is at
        or above `threshold`, else -1 (or "" for string labels).

        `threshold` is a similarity (e.g. from `keras_dml.evaluation.calibrate`),
        the same on every backend. `filter` as in `search`.
        """
        threshold = float(threshold)
        if not np.isfinite(threshold):
            raise ValueError(f"threshold must be a finite similarity, got {threshold!r}.")
        result = self.search(queries, 1, filter)
        unknown = storage.unknown(self._record["label_kind"])
        if not result.labels.shape[1]:
            return np.full(len(result.labels), unknown, result.labels.dtype)
        return np.where(result.scores[:, 0] >= threshold, result.labels[:, 0], unknown)

    def recall_vs_exact(self, queries, k=10):
        """Mean fraction of the exact top-k ids that this index's search returns.

        1.0 for the exact backend (and Milvus FLAT, ties aside); for an
        approximate one, its recall@k on `queries` (your data), the figure to
        tune `nprobe` / `ef_search` by. On Milvus the exact top-k is computed
        in memory from the whole collection.
        """
        found = self.search(queries, k).ids
        embeddings, ids = self._arrays(("vector",))[:2]
        from keras_dml.index.backends import Exact

        positions, _ = Exact(self.metric).search(embeddings, self._queries(queries), k)
        hits = [np.intersect1d(a, b).size for a, b in zip(found, ids[positions])]
        return float(np.mean(hits) / k)

    def check_model(self, model, allow_mismatch=False, run=None):
        """Refuses a model that is not the one whose embeddings the index holds.

        Args:
            model: A Keras model, or its `model_fingerprint`.
            allow_mismatch: Warn instead of raising. Defaults to False.
            run: The model's run directory, named in the message.

        Raises:
            ModelMismatchError: Both fingerprints are known and differ (the
                message names both, and the run paths where known). An index
                that records no fingerprint warns that it cannot check.
        """
        fingerprint = model if isinstance(model, str) else provenance.model_fingerprint(model)
        where = (f"Collection {self._store.collection!r} at {self._store.uri}"
                 if self.backend == "milvus" else "The index")
        provenance.compare_models(self.provenance, {"model_fingerprint": fingerprint,
                                                    "run": run}, allow_mismatch, where)

    def _queries(self, queries):
        queries = validation.embedding_array(queries, "queries")
        if queries.shape[1] != self.dim:
            raise ValueError(f"queries have dimension {queries.shape[1]} but the index holds "
                             f"dimension {self.dim}.")
        return queries

    # -- checks --------------------------------------------------------------------------

    def _check_labels(self, labels, n):
        kind = self._record["label_kind"]
        if labels is None:
            return np.full(n, storage.unknown(kind), dtype=storage.kind_dtype(kind))
        labels = validation.label_array(labels, n, "labels")
        if labels.dtype.kind == "f":
            if not np.all(labels == np.round(labels)):
                raise ValueError("labels must be integers or strings, got fractional floats.")
            labels = labels.astype(np.int64)
        if labels.dtype.kind == "S":
            labels = labels.astype(str)
        if labels.dtype.kind not in "iuU":
            raise ValueError(f"labels must be integers or strings, got dtype {labels.dtype}.")
        if kind is not None and storage.kind_of(labels) != kind:
            name = "string" if kind == "str" else "integer"
            raise ValueError(f"The index holds {name} labels; got labels of dtype {labels.dtype}.")
        return labels if labels.dtype.kind == "U" else labels.astype(np.int64)

    def _id_array(self, ids):
        ids = np.atleast_1d(np.asarray(ids))
        if ids.dtype.kind == "S":
            ids = ids.astype(str)
        if ids.ndim != 1 or ids.dtype.kind not in "iuU":
            raise ValueError(f"ids must be a list of integers or strings, got dtype {ids.dtype} "
                             f"and shape {ids.shape}.")
        kind = self._record["id_kind"]
        if kind is not None and storage.kind_of(ids) != kind:
            name = "string" if kind == "str" else "integer"
            raise ValueError(f"The index has {name} ids; got ids of dtype {ids.dtype}.")
        return ids if ids.dtype.kind == "U" else ids.astype(np.int64)

    def _check_ids(self, ids, n, replace):
        if ids is None:
            if self._record["id_kind"] == "str":
                raise ValueError("The index has string ids: pass ids= for the new items.")
            start = self._record["next_id"]
            return np.arange(start, start + n, dtype=np.int64)
        ids = np.asarray(ids)
        if ids.shape != (n,):
            raise ValueError(f"ids must be {n} integers or strings, one per embedding, got "
                             f"shape {ids.shape}.")
        ids = self._id_array(ids)
        if ids.dtype.kind == "U" and (not all(ids) or max(map(len, ids)) > 65535):
            raise ValueError("string ids must be non-empty and at most 65535 characters.")
        values, counts = np.unique(ids, return_counts=True)
        if values.size != n:
            raise ValueError(f"ids must be distinct; repeated: {values[counts > 1][:5].tolist()}.")
        if not replace:
            taken = ids[self._store.contains(ids)]
            if taken.size:
                raise ValueError(f"ids already in the index: {taken[:5].tolist()}; remove them "
                                 "first, or use upsert to replace them.")
        return ids

    def _write_record(self):
        if self.backend == "milvus":
            self._store.write_record()

    # -- persistence ---------------------------------------------------------------------

    def save(self, path, overwrite=False):
        """Writes the index to the directory `path` (NumPy + JSON files, no pickle),
        with its provenance in `index.json`. A Milvus index is written in full
        (as an exact in-memory index).

        An existing index directory is replaced only with `overwrite=True`.
        """
        embeddings, ids, labels, metadata, added = self._arrays()
        memory = self.backend != "milvus"
        storage.save(path, {
            "metric": self.metric,
            "backend": self.backend if memory else "exact",
            "backend_options": self._record["options"] if memory else {},
            "next_id": self._record["next_id"],
            "info": storage.check_info(self.info),
            "provenance": self.provenance,
        }, embeddings, ids, labels, metadata, added, overwrite)
        return str(path)

    @classmethod
    def load(cls, path, backend=None, **backend_options):
        """Reads an index written by `save` (optionally with another backend)."""
        config, embeddings, ids, labels, metadata, added = storage.load(path)
        options = config["backend_options"] if backend is None else backend_options
        recorded = {**config.get("provenance", {}), "dim": None}
        index = cls(config["metric"], backend or config["backend"], info=config.get("info"),
                    provenance=recorded, **options)
        if embeddings is not None:
            index._write(embeddings, labels, ids, metadata, replace=False, added=added)
        index._record["next_id"] = max(index._record["next_id"], int(config["next_id"]))
        return index

    @classmethod
    @hyperparameters.renamed_keywords(embedder="model", dataset="data")
    def from_model(cls, model, data, metric="cosine", backend="exact", batch_size=256,
                   verbose=1, info=None, metadata=None, preprocessing=None, *, uri=None,
                   token=None, collection=None, run=None, allow_mismatch=False,
                   skip_bad_images=False, **backend_options):
        """An index of `data` embedded by `model` (`keras_dml.inference`), with a
        progress line.

        The index records the model's `model_fingerprint` and the preprocessing of
        its image files in `provenance`; into an existing Milvus collection made by
        another model nothing is embedded: a `ModelMismatchError` names both (unless
        `allow_mismatch=True`).

        Args:
            model: A Keras model (or callable) mapping an image batch to
                `(batch, d)` embeddings, run in inference mode.
            data: What to embed, in any form `keras_dml.inference.embed` takes: a
                `LabeledImages` split (e.g. `keras_dml.datasets.from_directory(root)
                .test`; labels: its class names), image files `(paths, labels)` or
                a list of paths, arrays with or without labels, or finite batches
                (e.g. `keras_dml.data.evaluation_batches`). One label per item.
            metric, backend, info, backend_options: As in `Index`.
            uri, token, collection, allow_mismatch: As in `Index` (Milvus).
            batch_size: Batch size for splits, files and arrays. Defaults to 256.
            verbose: 1 shows the progress line. Defaults to 1.
            metadata: A list of one JSON value per item. Defaults to None: the
                image paths of file data, else none.
            preprocessing: The `keras_dml.data.Preprocessing` of image files.
                Defaults to None: the one the model records (a fitted
                `DMLModel`'s `embedder()` carries its training stream's), else
                the one `keras-dml train` uses for the model's input size
                (resize to size * 256 / 224, centre crop, [0, 1]), with a
                warning saying so.
            run: The run directory the model comes from, recorded in
                `provenance`. Defaults to None.
            skip_bad_images: Leave out image files that cannot be read or decoded
                (each named on stderr) instead of stopping at the first with an
                error naming it. Defaults to False.

        (`embedder=` and `dataset=` are the deprecated names of `model=` and `data=`.)

        Examples:

        >>> splits = keras_dml.datasets.from_directory("photos")  # doctest: +SKIP
        >>> index = Index.from_model(model.embedder(), splits.test)  # doctest: +SKIP
        >>> index.search(queries, k=3).metadata[0]  # doctest: +SKIP
        """
        from keras_dml.data.inputs import as_data
        from keras_dml.index.embedding import SOURCE_FORMS, items, recorded_preprocessing

        data = as_data(data, SOURCE_FORMS, "data")  # once, for everything below
        preprocessing = recorded_preprocessing(model, data, preprocessing)
        made = {"model_fingerprint": provenance.model_fingerprint(model),
                "preprocessing": None if preprocessing is None else preprocessing.to_dict(),
                "run": None if run is None else str(run)}
        index = cls(metric, backend, info=info, uri=uri, token=token, collection=collection,
                    provenance=made, allow_mismatch=allow_mismatch, **backend_options)
        try:
            embeddings, labels, metadata, _ = items(model, data, batch_size, verbose,
                                                    preprocessing, metadata, skip_bad_images)
            index.add(embeddings, labels=labels, metadata=metadata)
        except BaseException:
            index.close()
            raise
        return index
