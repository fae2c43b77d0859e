"""The served catalogue: a keras_dml collection (or an alias of one) on Milvus.

The collection's record says its metric, fields, image root and the fingerprint
of the model that embedded it. An alias is resolved again every
`refresh_seconds`: when it moves to a collection of the same model the service
follows it; to another model's, the catalogue is not ready (`not_ready` says
why) until the service reloads a matching model.

The same check heals the catalogue when Milvus fails: every call to Milvus waits
at most `timeout` seconds; after a failed call the next check connects again,
and a collection that Milvus released (a Milvus started again) is loaded again.
A check's outcome, failure included, is kept for `refresh_seconds` (or until a
search fails), so readiness stays cheap to ask.
"""

import os
import threading
import time

import numpy as np

from keras_dml.index import filters
from keras_dml.index.milvus import (DEFAULT_COLLECTION, TIMEOUT, MilvusStore, call, connect,
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
                 allow_mismatch=False, refresh_seconds=2.0, timeout=TIMEOUT):
        self.uri, self.name = os.fspath(uri), name or DEFAULT_COLLECTION
        self.fingerprint, self.source = fingerprint, source
        self.allow_mismatch, self.refresh_seconds = allow_mismatch, refresh_seconds
        self.timeout = timeout
        self.not_ready = None
        self._lock = threading.Lock()
        self._client = None
        self._token = token
        self._error = None  # the last check's failure, raised again until the next check
        self._stale = False  # a search failed since the last check: check at the next one
        if is_lite(self.uri) and not os.path.isdir(self.uri):
            raise FileNotFoundError(f"No Milvus Lite database at {self.uri}: give the --uri "
                                    "that keras-dml index wrote to.")
        self._client = connect(self.uri, token, timeout, dedicated=True)
        self._checked = 0.0
        try:
            collection = self._resolve()
            self._store = MilvusStore(self.uri, collection, token, timeout,
                                      call_timeout=timeout)
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
        """The folder the catalogue's image paths are relative to, or None: the
        recorded catalogue's root (`info["catalogue"]`, or an older record's
        `info["root"]`)."""
        info = self._store.record.get("info") or {}
        return (info.get("catalogue") or {}).get("root") or info.get("root")

    def _resolve(self):
        """The collection `name` stands for (itself unless it is an alias)."""
        try:
            if self._milvus(self._client.has_collection, self.name):
                return self._milvus(self._client.describe_collection,
                                    self.name)["collection_name"]
            names = self._milvus(self._client.list_collections)
        except Exception as error:  # pymilvus' MilvusException, grpc errors
            raise ConnectionError(f"Milvus at {self.uri}: {error}") from None
        raise FileNotFoundError(f"{self.uri} has no collection or alias {self.name!r}; it has "
                                f"{sorted(names)}.")

    def _milvus(self, method, *args):
        """A call of the catalogue's client that waits at most `timeout` seconds."""
        return call(method, self.uri, None, *args, timeout=self.timeout)

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
        """Checks what a search needs: Milvus answering, the alias' target (followed when
        it moved), the collection loaded (loaded again when Milvus released it). Runs at
        most every `refresh_seconds` unless `force` or a search failed since; in between
        the last outcome stands (`not_ready`, or its error raised again).

        Raises:
            ConnectionError: Milvus did not answer (within `timeout` seconds a call), or
                another thread's check took longer than that.
            FileNotFoundError: The collection or alias is gone.
        """
        if not self._lock.acquire(timeout=self.timeout):
            raise ConnectionError(f"Milvus at {self.uri} did not answer within "
                                  f"{self.timeout:g} s.")
        try:
            if not (force or self._stale) and \
                    time.monotonic() - self._checked < self.refresh_seconds:
                if self._error is not None:
                    raise type(self._error)(*self._error.args)
                return
            self._stale = False
            try:
                self._check(force)
                self._error = None
            except (ConnectionError, RuntimeError, FileNotFoundError) as error:
                self._error = error
                raise
            finally:
                self._checked = time.monotonic()
        finally:
            self._lock.release()

    def _check(self, force):
        if self._error is not None:  # the last check failed: connect again
            self._reconnect()
        collection = self._resolve()
        if force or collection != self._store.collection or self.not_ready:
            self._switch(collection)
        elif not self._store.loaded():
            self._store.load()

    def _reconnect(self):
        """New connections to Milvus (the old ones may wait on a server that went away)."""
        token, collection = self._token, self._store.collection
        release(self._client, self.uri)
        self._client = None
        self._client = connect(self.uri, token, self.timeout, dedicated=True)
        store = MilvusStore(self.uri, collection, token, self.timeout,
                            call_timeout=self.timeout)
        store.record = self._store.record
        self._store.close()
        self._store = store

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
        if self._stale:  # a search failed since the last check: wait for the next one
            raise RuntimeError(f"Milvus at {self.uri} failed a search; checking it again.")
        vectors = np.asarray(vectors, np.float32)
        dim = self.record["provenance"].get("dim")
        if dim is not None and (vectors.ndim != 2 or vectors.shape[1] != dim):
            # the query's fault, not Milvus': never marks the catalogue for a check
            raise ValueError(f"vectors of {dim} numbers expected, got shape {vectors.shape}.")
        # an expression, even empty, makes the store answer what it has rather than refuse
        try:
            return self._store.search(vectors, k, expression or "")
        except RuntimeError:  # Milvus failed (a ValueError is the query's): check it now
            self._stale = True
            raise

    def close(self):
        store = getattr(self, "_store", None)
        if store is not None:
            store.close()
        if self._client is not None:
            release(self._client, self.uri)
            self._client = None
