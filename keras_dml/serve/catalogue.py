"""The served catalogue: a keras_dml collection (or an alias of one) on Milvus.

The collection's record says its metric, fields, image root and the fingerprint
of the model that embedded it. An alias is resolved again every
`refresh_seconds`: when it moves to a collection of the same model the service
follows it; to another model's, the catalogue is not ready (`not_ready` says
why) until the service reloads a matching model.
"""

import os
import threading
import time

import numpy as np

from keras_dml.index import filters
from keras_dml.index.milvus import (DEFAULT_COLLECTION, TIMEOUT, MilvusStore, connect,
                                    is_lite, release)

__all__ = ["Catalogue", "check_fingerprints"]


def check_fingerprints(recorded, loaded, where, source):
    """None when the model fingerprints agree, else the one-line reason they do not."""
    if recorded is None:
        return (f"{where} records no model fingerprint: it cannot be checked against "
                f"{source} (rebuild it with keras-dml index).")
    if loaded is None:
        return (f"{source} records no model fingerprint (exported before keras_dml recorded "
                "one): export the run again to serve it.")
    if recorded != loaded:
        return (f"{where} holds embeddings of model {recorded}, but {source} is model "
                f"{loaded}: serve the model that built it, or rebuild it with this one.")
    return None


class Catalogue:
    """A collection or alias `name` at `uri`, checked against `fingerprint`.

    Raises (at construction):
        FileNotFoundError: No such collection or alias.
        ValueError: Not a keras_dml collection, or another model's (unless
            `allow_mismatch`).
        ConnectionError: Milvus cannot be reached.
    """

    def __init__(self, uri, name=None, token=None, fingerprint=None, source="the model",
                 allow_mismatch=False, refresh_seconds=2.0):
        self.uri, self.name = os.fspath(uri), name or DEFAULT_COLLECTION
        self.fingerprint, self.source = fingerprint, source
        self.allow_mismatch, self.refresh_seconds = allow_mismatch, refresh_seconds
        self.not_ready = None
        self._lock = threading.Lock()
        self._client = None
        if is_lite(self.uri) and not os.path.isdir(self.uri):
            raise FileNotFoundError(f"No Milvus Lite database at {self.uri}: give the --uri "
                                    "that keras-dml index wrote to.")
        self._client = connect(self.uri, token, TIMEOUT)
        self._checked = 0.0
        try:
            collection = self._resolve()
            self._store = MilvusStore(self.uri, collection, token, TIMEOUT)
            reason = self._switch(collection)
        except BaseException:
            self.close()
            raise
        if reason is not None:
            self.close()
            raise ValueError(reason)

    @property
    def collection(self):
        """The collection that answers (the alias' target)."""
        return self._store.collection

    @property
    def record(self):
        return self._store.record

    @property
    def root(self):
        """The folder the catalogue's image ids are relative to, or None."""
        record = self._store.record
        return record.get("root") or record.get("info", {}).get("root")

    def _resolve(self):
        """The collection `name` stands for (itself unless it is an alias)."""
        client = self._client
        try:
            if client.has_collection(self.name):
                return client.describe_collection(self.name)["collection_name"]
        except Exception as error:  # pymilvus' MilvusException, grpc errors
            raise ConnectionError(f"Milvus at {self.uri}: {error}") from None
        raise FileNotFoundError(f"{self.uri} has no collection or alias {self.name!r}; it has "
                                f"{sorted(client.list_collections())}.")

    def _switch(self, collection):
        """Reads `collection`'s record; None when it is served from now on, else why not."""
        self._store.collection = collection
        self._store.record = self._store.read_record()
        where = f"collection {collection!r}" + (
            f" (alias {self.name!r})" if collection != self.name else "")
        reason = check_fingerprints(self._store.record["provenance"].get("model_fingerprint"),
                                    self.fingerprint, where, self.source)
        if reason is not None and self.allow_mismatch:
            reason = None
        if reason is None:
            self._store.load()
        self.not_ready = reason
        self._checked = time.monotonic()
        return reason

    def refresh(self, force=False):
        """Follows a moved alias (at most every `refresh_seconds` unless `force`)."""
        with self._lock:
            if not force and time.monotonic() - self._checked < self.refresh_seconds:
                return
            collection = self._resolve()
            if force or collection != self._store.collection or self.not_ready:
                self._switch(collection)
            self._checked = time.monotonic()

    def reload(self, fingerprint, source):
        """Checks against a newly loaded model; returns the reason it is not ready, or None."""
        with self._lock:
            self.fingerprint, self.source = fingerprint, source
            return self._switch(self._resolve())

    def expression(self, filter):
        """The Milvus expression of a dict filter (`keras_dml.index.filters`), or None."""
        if filter is None:
            return None
        fields = self._store.record.get("metadata_fields", ())
        return filters.milvus_expression(filters.parse(filter, fields))

    def search(self, vectors, k, expression=None):
        """`(ids, scores, labels, metadata)` arrays of the k best items per vector (all
        of them when the catalogue holds fewer than k: the rest padded with score -inf)."""
        # an expression, even empty, makes the store answer what it has rather than refuse
        return self._store.search(np.asarray(vectors, np.float32), k, expression or "")

    def close(self):
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()
        if self._client is not None:
            release(self._client, self.uri)
            self._client = None
