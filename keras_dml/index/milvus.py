"""The Milvus store of `Index`: a collection in a Milvus Lite file or on a Milvus server.

One client class (`pymilvus.MilvusClient`) reaches both: a path ending in
`.db` is an embedded Milvus Lite database (the `milvus-lite` package), an
`http(s)://` URI (with an optional token) a Milvus server or cluster. Install
both with `pip install "keras_dml[milvus]"`.

A collection holds one row per item:

    id        INT64 or VARCHAR primary key (the index's ids)
    vector    FLOAT_VECTOR (dim)
    label     INT64 or VARCHAR
    metadata  JSON: {"v": the item's metadata}
    added     DOUBLE: seconds since the epoch when the item was added
    seq       INT64: the order items were written in (`Index.embeddings`' order)

and, in its `keras_dml.record` property, the index's record (metric, id and
label kinds, next id, metadata fields, index type and options, info and
provenance), and in `keras_dml.created` when it was created. Scores leave the
store as `Index` defines them: cosine similarity, inner product, or minus the
squared Euclidean distance.
"""

import contextlib
import importlib.util
import json
import logging
import os
import threading
import time
from urllib.parse import urlparse

import numpy as np

from keras_dml.hyperparameters import integer_at_least
from keras_dml.index import storage

__all__ = ["CREATED", "DEFAULT_COLLECTION", "METRICS", "MilvusStore", "TIMEOUT", "call",
           "check_database", "check_index_options", "connect", "from_milvus_names", "is_lite",
           "metadata_path", "parse_record", "read_record", "release", "search_options"]

RECORD = "keras_dml.record"
CREATED = "keras_dml.created"  # property: seconds since the epoch when it was created
FORMAT = "keras_dml.milvus/1"
DEFAULT_COLLECTION = "keras_dml"
METRICS = {"cosine": "COSINE", "dot": "IP", "euclidean": "L2"}
INDEX_TYPES = {  # keras_dml option -> Milvus build / search parameter, and defaults
    "FLAT": {},
    "HNSW": {"m": ("build", "M", 32), "ef_construction": ("build", "efConstruction", 80),
             "ef_search": ("search", "ef", 64)},
    "IVF_FLAT": {"nlist": ("build", "nlist", 128), "nprobe": ("search", "nprobe", 16)},
}
INSERT_ROWS = 5000  # rows per insert call (a gRPC message stays well under its 64 MB cap)
QUERY_ROWS = 1024  # queries per search call
MAX_K = 16384  # Milvus' cap on results per query
MAX_STRING = 65535  # VARCHAR length cap of ids and labels
TIMEOUT = 10.0  # seconds to reach a server before giving up

_LITE_USERS = {}  # absolute Lite path -> open stores in this process
_LITE_LOCK = threading.Lock()


@contextlib.contextmanager
def _quiet():
    """pymilvus and milvus-lite log every failed call with a traceback; keras_dml
    raises its own one-line error instead, so their logs are muted meanwhile."""
    loggers = [logging.getLogger(name) for name in ("pymilvus", "milvus_lite", "grpc._server")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def metadata_path(key=None):
    """The Milvus JSON path of an item's metadata as `MilvusStore.insert` stores it
    (`{"v": metadata}`), or of one key of dict metadata: the one place filters
    learn the stored form."""
    path = 'metadata["v"]'
    return path if key is None else f"{path}[{json.dumps(key)}]"


def is_lite(uri):
    return urlparse(str(uri)).scheme.lower() not in ("http", "https", "tcp", "grpc", "unix")


def check_index_options(options):
    """`(index_type, options)` with every parameter of the index type set."""
    options = dict(options)
    index_type = str(options.pop("index_type", "FLAT")).upper()
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type must be one of {sorted(INDEX_TYPES)}, got {index_type!r}.")
    known = INDEX_TYPES[index_type]
    unknown = set(options) - set(known)
    if unknown:
        raise ValueError(f"Unknown options {sorted(unknown)} for Milvus index_type "
                         f"{index_type!r}; known: {sorted(known)}.")
    checked = {}
    for name, (_, _, default) in known.items():
        value = options.get(name)
        checked[name] = default if value is None else integer_at_least(name, value, 1,
                                                                       strict=True)
    return index_type, checked


def search_options(index_type):
    """The options of `index_type` read at search time (changeable on reopening)."""
    return [name for name, (when, _, _) in INDEX_TYPES[index_type].items() if when == "search"]


def from_milvus_names(index_type, stage, params, source="parameters"):
    """keras_dml options (`{"ef_search": 256}`) of Milvus-named `params` (`{"ef": "256"}`,
    values integers or their text) of `index_type` at `stage`, `"build"` or `"search"`.

    Raises:
        ValueError: A key `index_type` does not take at `stage`, or a value that is
            not an integer >= 1; the message names `source`, the key and the keys
            allowed.
    """
    index_type = str(index_type).upper()
    if index_type not in INDEX_TYPES:
        raise ValueError(f"index_type must be one of {sorted(INDEX_TYPES)}, got {index_type!r}.")
    names = {milvus: (name, when) for name, (when, milvus, _) in INDEX_TYPES[index_type].items()}
    allowed = [milvus for milvus, (_, when) in names.items() if when == stage]
    options = {}
    for key, value in params.items():
        if key not in allowed:
            other = "" if key not in names else \
                " (a build parameter, fixed when the collection is created)" if \
                names[key][1] == "build" else " (a search parameter)"
            raise ValueError(f"{source}: {index_type} takes {', '.join(allowed) or 'no keys'}"
                             f" at {stage} time, got {key!r}{other}.")
        number = int(value) if isinstance(value, str) and value.strip().isdigit() else value
        try:
            options[names[key][0]] = integer_at_least(key, number, 1, strict=True)
        except ValueError:
            raise ValueError(f"{source} {key} must be a positive integer, got {value!r}.") \
                from None
    return options


def read_record(uri, collection, token=None, timeout=None):
    """The record of an existing keras_dml collection, or an error naming what is missing."""
    check_database(uri)
    store = MilvusStore(uri, collection, token, TIMEOUT if timeout is None else timeout)
    try:
        if not store.exists():
            raise FileNotFoundError(f"{uri} has no collection {collection!r}; it has "
                                    f"{sorted(store.collections())}.")
        return store.read_record()
    finally:
        store.close()


def check_database(uri):
    """Refuses a Lite path that holds no database (rather than creating one there)."""
    if is_lite(uri) and not os.path.isdir(os.fspath(uri)):
        raise FileNotFoundError(f"No Milvus Lite database at {uri}.")
    if is_lite(uri) and os.path.isfile(os.path.join(os.fspath(uri), storage.CONFIG)):
        raise ValueError(f"{uri} is an index saved by Index.save: read it with Index.load.")


def parse_record(properties, collection, uri):
    """The keras_dml record among a collection's properties, or None when it has none
    (a collection keras_dml did not make).

    Raises:
        ValueError: The record has another format.
    """
    if RECORD not in properties:
        return None
    record = json.loads(properties[RECORD])
    if record.get("format") != FORMAT:
        raise ValueError(f"Collection {collection!r} at {uri} has format "
                         f"{record.get('format')!r}, expected {FORMAT!r}.")
    return record


def connect(uri, token=None, timeout=TIMEOUT, dedicated=False):
    """A `MilvusClient` on `uri`, or a one-line error saying why not.

    A `dedicated` client has a connection of its own (pymilvus shares one per server
    URI otherwise): closing it and connecting again reconnects (`keras_dml.serve`)."""
    try:
        from pymilvus import MilvusClient
    except ImportError:
        raise ImportError('The "milvus" backend needs pymilvus and milvus-lite: '
                          'pip install "keras_dml[milvus]".') from None
    uri = os.fspath(uri)
    if not is_lite(uri):
        try:
            with _quiet():
                return MilvusClient(uri=uri, token=token or "", timeout=timeout,
                                    **({"dedicated": True} if dedicated else {}))
        except Exception as error:  # pymilvus raises MilvusException and grpc errors
            raise ConnectionError(f"Cannot reach Milvus at {uri}: "
                                  f"{_message(error)}") from None
    path = _check_lite_path(uri)
    try:
        with _quiet():
            client = MilvusClient(path)
    except Exception as error:
        raise _lite_error(path, error) from None
    with _LITE_LOCK:
        _LITE_USERS[path] = _LITE_USERS.get(path, 0) + 1
    return client


def _check_lite_path(uri):
    if importlib.util.find_spec("milvus_lite") is None:
        raise ImportError(f"{uri} is a Milvus Lite file, which needs milvus-lite: "
                          'pip install "keras_dml[milvus]".')
    path = os.path.abspath(uri)
    if not path.endswith(".db"):
        raise ValueError(f"uri {uri!r}: a Milvus Lite database is a path ending in .db, a "
                         "server an http(s):// URI.")
    if os.path.exists(path):
        if not os.path.isdir(path):
            raise ValueError(f"{uri} is not a Milvus Lite database: it is a file (a Lite "
                             "database is a folder that Milvus Lite writes).")
        contents = set(os.listdir(path))
        if contents and "collections" not in contents:
            raise ValueError(f"{uri} is not a Milvus Lite database: the folder holds "
                             f"{sorted(contents)[:5]}, not Milvus Lite's collections/.")
    elif not os.path.isdir(os.path.dirname(path)):
        raise FileNotFoundError(f"Cannot create the Milvus Lite database {uri}: its folder "
                                f"{os.path.dirname(path)} does not exist.")
    return path


def _open_here(uri):
    """Whether this process already serves the Lite file (then a child could not open it)."""
    with _LITE_LOCK:
        return os.path.abspath(uri) in _LITE_USERS


def serve_lite(uri):
    """A `LiteProcess` serving the Lite database `uri` from a child process, or a
    one-line error (another process holds it, or it cannot be opened)."""
    from keras_dml.index.lite_process import LiteProcess

    path = _check_lite_path(uri)
    try:
        return LiteProcess(path, _locked)
    except RuntimeError as error:
        raise _lite_error(path, error) from None


def _lite_error(path, error):
    if _locked(path):
        return RuntimeError(
            f"{path} is open in another process: Milvus Lite lets one process open a database "
            "at a time. Close it there (Index.close(), or let that process end), or serve it "
            f"to several processes: milvus-lite server --data-dir {path} --port 19530, and "
            "--uri http://127.0.0.1:19530.")
    return RuntimeError(f"Cannot open the Milvus Lite database {path}: {_message(error)}")


def _locked(path):
    import fcntl

    lock = os.path.join(path, "LOCK")
    if not os.path.isfile(lock):
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def _message(error):
    message = getattr(error, "message", None) or str(error)
    return " ".join(str(message).split())


def release(client, uri):
    """Closes a client; the last one on a Lite file in this process releases the
    file, so another process can open it."""
    with _quiet(), contextlib.suppress(Exception):
        client.close()
    if not is_lite(uri):
        return
    path = os.path.abspath(uri)
    with _LITE_LOCK:
        _LITE_USERS[path] = _LITE_USERS.get(path, 1) - 1
        last = _LITE_USERS[path] <= 0
        if last:
            del _LITE_USERS[path]
    if last:
        from milvus_lite.server_manager import server_manager_instance

        server_manager_instance.release_server(path)


class MilvusStore:
    """A Milvus collection behind `Index` (see the module docstring).

    The collection is created at the first insert, when the dimension and the
    kinds of ids and labels are known; until then `record` lives in memory.
    An alias (`keras_dml.index.collections`) stands for the collection it points
    to when the store opens: `collection` is that collection's name, and the
    store stays on it, with its model, when the alias moves to another one.
    """

    name = "milvus"

    def __init__(self, uri, collection, token=None, timeout=TIMEOUT, lite_process=False,
                 call_timeout=None):
        self.uri = os.fspath(uri)
        self.collection = collection or DEFAULT_COLLECTION
        self.call_timeout = call_timeout
        self._server = None
        if lite_process and is_lite(self.uri) and not _open_here(self.uri):
            self._server = serve_lite(self.uri)
        try:
            self._client = connect(self._server.uri if self._server else self.uri, token,
                                   timeout, dedicated=call_timeout is not None)
        except BaseException:
            if self._server is not None:
                self._server.stop()
            raise
        self.record = None
        try:
            self.collection = self._target(self.collection)
        except BaseException:
            self.close()
            raise

    # -- the record ---------------------------------------------------------------------

    def _target(self, name):
        """The collection `name` stands for: the one an alias points to now, else `name`."""
        if name not in self._call(self._client.list_aliases)["aliases"]:
            return name
        return self._call(self._client.describe_alias, name)["collection_name"]

    def exists(self):
        return self._call(self._client.has_collection, self.collection)

    def collections(self):
        return self._call(self._client.list_collections)

    def read_record(self):
        """The collection's record, or an error naming the collection when it is
        not a keras_dml collection."""
        properties = self._call(self._client.describe_collection,
                                self.collection).get("properties", {})
        record = parse_record(properties, self.collection, self.uri)
        if record is None:
            raise ValueError(f"Collection {self.collection!r} at {self.uri} was not made by "
                             "keras_dml (it has no keras_dml record).")
        return record

    def load(self):
        """Loads an existing collection for search (a reopened one starts released)."""
        self._call(self._client.load_collection, self.collection)

    def loaded(self):
        """Whether the collection is loaded (a Milvus started again has it released)."""
        state = self._call(self._client.get_load_state, self.collection)["state"]
        return getattr(state, "name", str(state)).rsplit(".", 1)[-1] == "Loaded"

    def write_record(self):
        if self.exists():
            self._call(self._client.alter_collection_properties, self.collection,
                       properties={RECORD: json.dumps({"format": FORMAT, **self.record})})

    def _create(self, dim, id_kind, label_kind):
        from pymilvus import DataType

        client = self._client
        schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
        text = {"datatype": DataType.VARCHAR, "max_length": MAX_STRING}
        number = {"datatype": DataType.INT64}
        schema.add_field("id", is_primary=True, **(text if id_kind == "str" else number))
        schema.add_field("vector", DataType.FLOAT_VECTOR, dim=dim)
        schema.add_field("label", **(text if label_kind == "str" else number))
        schema.add_field("metadata", DataType.JSON, nullable=True)
        schema.add_field("added", DataType.DOUBLE)
        schema.add_field("seq", DataType.INT64)
        params = client.prepare_index_params()
        build = self._parameters("build")
        params.add_index("vector", index_type=self.record["options"]["index_type"],
                         metric_type=METRICS[self.record["metric"]], params=build)
        if is_lite(self.uri) and build:
            # pymilvus 3 sends build parameters as separate key-value pairs, which
            # milvus-lite 3.2 ignores: it reads them from one JSON "params" pair.
            params[0]._configs["params"] = build
        record = json.dumps({"format": FORMAT, **self.record})
        self._call(client.create_collection, self.collection, schema=schema,
                   index_params=params, properties={RECORD: record, CREATED: repr(time.time())})

    def _search_parameters(self, k):
        params = self._parameters("search")
        if "ef" in params:  # Milvus requires ef >= k
            params["ef"] = max(params["ef"], k)
        return params

    def _parameters(self, stage):
        options = self.record["options"]
        return {milvus: options[name] for name, (when, milvus, _) in
                INDEX_TYPES[options["index_type"]].items() if when == stage}

    # -- contents ------------------------------------------------------------------------

    def count(self):
        """The live rows: an unfiltered `count(*)`, which Milvus Lite answers from
        its primary keys (a walk over every segment's keys, no rows read), a
        server from its segments' statistics."""
        if not self.exists():
            return 0
        rows = self._call(self._client.query, self.collection, filter="",
                          output_fields=["count(*)"])
        return int(rows[0]["count(*)"])

    def contains(self, ids):
        """A boolean per id: whether the collection holds it."""
        if not self.exists() or not len(ids):
            return np.zeros(len(ids), bool)
        found = set()
        for start in range(0, len(ids), INSERT_ROWS):
            rows = self._call(self._client.get, self.collection,
                              ids=_plain(ids[start:start + INSERT_ROWS]), output_fields=["id"])
            found.update(row["id"] for row in rows)
        return np.array([i in found for i in _plain(ids)], bool)

    def insert(self, embeddings, ids, labels, metadata, added, replace=False):
        if not self.exists():
            self._create(embeddings.shape[1], self.record["id_kind"], self.record["label_kind"])
        write = self._client.upsert if replace else self._client.insert
        ids, labels, added = _plain(ids), _plain(labels), added.tolist()
        first = self.record.setdefault("next_seq", 0)
        for start in range(0, len(ids), INSERT_ROWS):
            rows = [{"id": ids[i], "vector": embeddings[i], "label": labels[i],
                     "metadata": {"v": metadata[i]}, "added": added[i], "seq": first + i}
                    for i in range(start, min(start + INSERT_ROWS, len(ids)))]
            self._call(write, self.collection, rows)
        self.record["next_seq"] = first + len(ids)
        self.write_record()

    def delete(self, ids):
        for start in range(0, len(ids), INSERT_ROWS):
            self._call(self._client.delete, self.collection,
                       ids=_plain(ids[start:start + INSERT_ROWS]))

    def get(self, ids):
        """float32 embeddings of `ids` in their order (every id must be present)."""
        vectors = {}
        for start in range(0, len(ids), INSERT_ROWS):
            for row in self._call(self._client.get, self.collection,
                                  ids=_plain(ids[start:start + INSERT_ROWS]),
                                  output_fields=["id", "vector"]):
                vectors[row["id"]] = row["vector"]
        return np.asarray([vectors[i] for i in _plain(ids)], np.float32).reshape(len(ids), -1)

    def arrays(self, fields=("vector", "label", "metadata")):
        """`(embeddings, ids, labels, metadata, added)` of the whole collection,
        in the order written; only `fields` (and ids and times) are read, the
        others are None (all None while it is empty)."""
        rows = [row for batch in self.rows(fields) for row in batch]
        if not rows:
            return None, None, None, [], np.zeros([0])
        added = np.array([row["added"] for row in rows], np.float64)
        order = np.argsort([row["seq"] for row in rows], kind="stable")
        rows = [rows[i] for i in order]
        record = self.record
        ids = np.array([row["id"] for row in rows], storage.kind_dtype(record["id_kind"]))
        embeddings = labels = metadata = None
        if "vector" in fields:
            embeddings = np.asarray([row["vector"] for row in rows], np.float32)
        if "label" in fields:
            labels = np.array([row["label"] for row in rows],
                              storage.kind_dtype(record["label_kind"]))
        if "metadata" in fields:
            metadata = [(row.get("metadata") or {}).get("v") for row in rows]
        return embeddings, ids, labels, metadata, added[order]

    def rows(self, fields=("vector", "label", "metadata"), batch_size=INSERT_ROWS):
        """Every row's id, time added, order and `fields`, in batches of dicts."""
        if not self.exists():
            return
        iterator = self._call(self._client.query_iterator, self.collection,
                              batch_size=batch_size, filter="",
                              output_fields=["id", "added", "seq", *fields])
        try:
            while True:
                batch = self._call(iterator.next)
                if not batch:
                    return
                yield batch
        finally:
            iterator.close()

    # -- search --------------------------------------------------------------------------

    def search(self, queries, k, expression=None):
        """`(ids, scores, labels, metadata)` of the k best rows per query, as
        `MemoryStore.search` returns them, without counting the collection.

        Without `expression` (a Milvus filter), k above the collection's size is
        an error, as in memory; with it, k is capped at the widest answer (the
        number of passing rows, on FLAT). A query that finds fewer than k (an
        approximate index may) gets the rest padded: unknown id and label,
        score -inf. The collection is counted only when an unfiltered answer
        comes back short, to tell k above its size from such a query.
        """
        if not self.exists():
            raise ValueError(storage.EMPTY)
        if k > MAX_K:
            raise ValueError(f"k={k}: Milvus returns at most {MAX_K} items per query.")
        hits = []
        for start in range(0, len(queries), QUERY_ROWS):
            hits.extend(self._call(
                self._client.search, self.collection, data=list(queries[start:start + QUERY_ROWS]),
                limit=k, filter=expression or "", anns_field="vector",
                output_fields=["label", "metadata"],
                search_params={"params": self._search_parameters(k)}))
        widest = max((len(row) for row in hits), default=k)
        if expression is not None:
            k = min(k, widest)
        elif widest < k:
            size = self.count()
            if not size:
                raise ValueError(storage.EMPTY)
            if k > size:
                raise ValueError(storage.exceeds(k, size))
        return self._result(hits, k)

    def _result(self, hits, k):
        """Milvus' hits as arrays of k per query (padded), scores as `Index` defines them."""
        sign = -1.0 if self.record["metric"] == "euclidean" else 1.0  # L2: squared distance
        id_kind, label_kind = self.record["id_kind"], self.record["label_kind"]
        pad = (storage.unknown(id_kind), -np.inf, storage.unknown(label_kind), None)
        rows = [[(hit["id"], sign * float(hit["distance"]), hit["entity"]["label"],
                  (hit["entity"].get("metadata") or {}).get("v")) for hit in row[:k]]
                + [pad] * (k - len(row[:k])) for row in hits]
        ids = np.array([[hit[0] for hit in row] for row in rows],
                       storage.kind_dtype(id_kind)).reshape(len(rows), k)
        scores = np.array([[hit[1] for hit in row] for row in rows],
                          np.float32).reshape(len(rows), k)
        labels = np.array([[hit[2] for hit in row] for row in rows],
                          storage.kind_dtype(label_kind)).reshape(len(rows), k)
        metadata = [[hit[3] for hit in row] for row in rows]
        return ids, scores, labels, metadata

    def flush(self):
        """Seals the rows written so far: Milvus Lite searches rows written since the last
        flush by a slow path (seconds a search at 100,000 items)."""
        if self.exists():
            self._call(self._client.flush, self.collection)

    def close(self):
        if self._client is not None:
            release(self._client, self._server.uri if self._server else self.uri)
            self._client = None
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _call(self, method, *args, **kwargs):
        """`method(*args, **kwargs)` through `call`; a method of the client waits at most
        `call_timeout` seconds (when set) for Milvus, retries included."""
        if self._client is None:
            raise RuntimeError(f"The index on {self.uri} is closed.")
        if self.call_timeout is not None and getattr(method, "__self__", None) is self._client:
            kwargs.setdefault("timeout", self.call_timeout)
        return call(method, self.uri, self.collection, *args, **kwargs)


def call(method, uri, collection, *args, **kwargs):
    """`method(*args, **kwargs)` of a `MilvusClient`, with pymilvus' logs muted and its
    errors raised as one-line keras_dml errors naming `uri` and `collection` (or None)."""
    try:
        with _quiet():
            return method(*args, **kwargs)
    except Exception as error:
        if type(error).__module__.startswith(("pymilvus", "grpc", "milvus_lite")):
            raise _translate(error, uri, collection) from None
        raise


def _translate(error, uri, collection):
    message = _message(error)
    if "unknown field" in message or "field" in message and "not exist" in message:
        return ValueError(f"Milvus filter refused on collection {collection!r}: {message}")
    if any(word in message.lower() for word in ("parse", "expr", "token", "at column")):
        return ValueError(f"Milvus refused the filter expression: {message}")
    where = "" if collection is None else f" (collection {collection!r})"
    return RuntimeError(f"Milvus at {uri}{where}: {message}")


def _plain(values):
    """NumPy values as Python ints and strs, as pymilvus sends them."""
    return np.asarray(values).tolist()
