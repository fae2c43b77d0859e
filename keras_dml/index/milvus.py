"""A minimal `Index` on Milvus (a Milvus Lite file or a server), for `keras-dml index --uri`.

Stop-gap until the store seam lands (issue 48 section 1, built on another
branch): the part of the agreed `Index` API the command line needs, with
string ids (the catalogue's relative paths), labels, JSON metadata and the
provenance recorded in a collection property.
"""

import json
import os

import numpy as np

from keras_dml.index import provenance as provenances

DEFAULT_COLLECTION = "keras_dml"
RECORD = "keras_dml"  # the collection property holding metric, dim, info and provenance
METRICS = {"cosine": "COSINE", "dot": "IP", "euclidean": "L2"}
ID_LENGTH = 4096
LABEL_LENGTH = 1024


def _client(uri, token):
    import logging

    for name in ("pymilvus", "milvus_lite"):  # errors are raised, not logged
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        from pymilvus import MilvusClient
    except ModuleNotFoundError:
        raise ModuleNotFoundError("pymilvus is not installed: pip install "
                                  "\"keras_dml[milvus]\"", name="pymilvus") from None
    from pymilvus.exceptions import MilvusException

    remote = str(uri).startswith(("http://", "https://", "tcp://"))
    if not remote and not str(uri).endswith(".db"):
        raise ValueError(f"{uri}: a Milvus Lite database's name ends in .db (e.g. "
                         "catalogue.db); a server's URI starts with http:// or https://.")
    if not remote and os.path.isfile(uri):
        raise ValueError(f"{uri} is a file, not a Milvus Lite database (a folder that "
                         "keras-dml index --uri creates).")
    try:
        return MilvusClient(uri=str(uri), token=token or "", timeout=10) if remote \
            else MilvusClient(str(uri))
    except MilvusException as error:
        if not remote and _locked(uri):
            raise ValueError(f"{uri} is open in another process: Milvus Lite lets one process "
                             "use a database at a time (serve it to several with `milvus-lite "
                             "server --data-dir ...` and --uri http://...).") from None
        raise ValueError(f"cannot reach Milvus at {uri}: {error.message}") from None


def _locked(path):
    """Whether another process holds the Milvus Lite database's lock file."""
    import fcntl

    lock = os.path.join(path, "LOCK")
    if not os.path.isfile(lock):
        return False
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


class MilvusIndex:
    """Items in a Milvus collection: string ids, vectors, labels, metadata."""

    def __init__(self, client, uri, collection, metric, dim, info, provenance):
        self._client, self.uri, self.collection = client, uri, collection
        self.metric, self._dim, self.info = metric, dim, info
        self._provenance = provenance
        self.backend = "milvus"

    @classmethod
    def create(cls, metric="cosine", uri="keras_dml.db", collection=None, token=None,
               info=None, provenance=None, index_type="FLAT", **index_params):
        client = _client(uri, token)
        collection = collection or DEFAULT_COLLECTION
        if client.has_collection(collection):
            raise FileExistsError(f"{uri} already holds the collection {collection!r}.")
        return cls(client, uri, collection, metric, None, info or {},
                   {**(provenance or {}), "index_type": index_type,
                    "index_params": index_params})

    @classmethod
    def open(cls, uri, collection=None, token=None):
        client = _client(uri, token)
        collection = collection or DEFAULT_COLLECTION
        if not client.has_collection(collection):
            raise FileNotFoundError(f"{uri} holds no collection {collection!r}.")
        properties = client.describe_collection(collection).get("properties") or {}
        record = json.loads(properties.get(RECORD, "{}"))
        client.load_collection(collection)
        return cls(client, uri, collection, record.get("metric", "cosine"), record.get("dim"),
                   record.get("info", {}), record.get("provenance", {}))

    def _make(self, dim):
        from pymilvus import DataType

        schema = self._client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=ID_LENGTH)
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("label", DataType.VARCHAR, max_length=LABEL_LENGTH)
        schema.add_field("metadata", DataType.JSON)
        params = self._client.prepare_index_params()
        params.add_index("vector", index_type=self._provenance["index_type"],
                         metric_type=METRICS[self.metric],
                         params=self._provenance["index_params"])
        self._dim = dim
        record = {"metric": self.metric, "dim": dim, "info": self.info,
                  "provenance": self._provenance}
        self._client.create_collection(self.collection, schema=schema, index_params=params,
                                       properties={RECORD: json.dumps(record)})

    @property
    def dim(self):
        return self._dim

    @property
    def provenance(self):
        return {"model_fingerprint": None, "preprocessing": None, "run": None,
                **self._provenance, "dim": self._dim, "metric": self.metric}

    def check_model(self, fingerprint, allow_mismatch=False, run=None):
        return provenances.check_model(self.provenance, fingerprint, allow_mismatch, run)

    def __len__(self):
        if self._dim is None:
            return 0
        return int(self._client.query(self.collection, filter="", output_fields=["count(*)"])
                   [0]["count(*)"])

    @property
    def ids(self):
        if self._dim is None:
            return []
        found = []
        iterator = self._client.query_iterator(self.collection, batch_size=10000,
                                               output_fields=["id"])
        try:
            while batch := iterator.next():
                found.extend(row["id"] for row in batch)
        finally:
            iterator.close()
        return found

    def upsert(self, embeddings, labels=None, ids=None, metadata=None):
        embeddings = np.asarray(embeddings, np.float32)
        if self._dim is None:
            self._make(embeddings.shape[1])
        if embeddings.shape[1] != self._dim:
            raise ValueError(f"embeddings have dimension {embeddings.shape[1]} but the "
                             f"collection holds dimension {self._dim}.")
        n = len(embeddings)
        labels = [""] * n if labels is None else [str(label) for label in labels]
        metadata = [None] * n if metadata is None else list(metadata)
        rows = [{"id": str(i), "vector": v, "label": y, "metadata": {"value": m}}
                for i, v, y, m in zip(ids, embeddings.tolist(), labels, metadata)]
        self._client.upsert(self.collection, rows)
        return list(ids)

    def remove(self, ids):
        self._client.delete(self.collection, ids=[str(i) for i in ids])

    def search(self, queries, k=1, filter=None):
        from keras_dml.index.index import SearchResult

        expression = ""
        if isinstance(filter, dict):
            values = filter["label"]
            values = [values] if isinstance(values, str) else list(values)
            expression = f"label in {json.dumps([str(v) for v in values])}"
        elif filter:
            expression = filter
        hits = self._client.search(self.collection, np.asarray(queries, np.float32).tolist(),
                                   limit=k, filter=expression,
                                   output_fields=["label", "metadata"])
        width = max((len(row) for row in hits), default=0)
        ids = np.full((len(hits), width), "", dtype=object)
        scores = np.full((len(hits), width), np.nan, np.float32)
        labels = np.full((len(hits), width), "", dtype=object)
        metadata = []
        for r, row in enumerate(hits):
            metadata.append([hit["entity"]["metadata"]["value"] for hit in row])
            for c, hit in enumerate(row):
                ids[r, c], scores[r, c] = hit["id"], hit["distance"]
                labels[r, c] = hit["entity"]["label"]
        if self.metric == "euclidean":
            scores = -scores
        return SearchResult(ids=ids.astype(str), scores=scores, labels=labels.astype(str),
                            metadata=metadata)
