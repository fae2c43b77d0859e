"""What the web routes call: the model, the catalogue and the batched search.

Each request is a `Query` (an encoded image or a vector, with its k and filter);
queries that arrive together are embedded in one forward pass, and those that
share k and filter are searched in one Milvus call.
"""

import dataclasses
import os
import threading

import numpy as np

from keras_dml.index.milvus import TIMEOUT
from keras_dml.serve.batcher import MicroBatcher
from keras_dml.serve.catalogue import Catalogue
from keras_dml.serve.embedders import DecodeError, Embedder, load_embedder
from keras_dml.serve.uploads import UploadError

__all__ = ["Query", "Service"]


@dataclasses.dataclass(frozen=True)
class Query:
    """One search: `image` (encoded bytes) or `vector`, `k`, a dict `filter` and its
    Milvus `expression`, and a `rerank` method (or None)."""

    image: object = None
    vector: object = None
    k: int = 10
    expression: object = None
    filter: object = None
    rerank: object = None


class Service:
    """The served model (`embedder`) and `catalogue`, and `search(query)` through a
    `MicroBatcher` of up to `max_batch` queries.

    Args:
        model: An `Embedder`, or a path for `load_embedder` (a SavedModel export, a
            run or a `.keras` file, or a pretrained backbone's name); a path can be
            reloaded (`reload`).
        uri, collection, milvus_token: The Milvus catalogue (collection or alias).
        allow_mismatch: Serve even when the catalogue's model fingerprint differs.
        refresh_seconds: How often the catalogue is checked again (`Catalogue.refresh`).
        max_batch, max_wait: The batcher's bounds (queries, seconds).
        milvus_timeout: Seconds any one call to Milvus may take.
    """

    def __init__(self, model, uri, collection=None, milvus_token=None, allow_mismatch=False,
                 refresh_seconds=2.0, max_batch=32, max_wait=0.005, milvus_timeout=TIMEOUT):
        self.model_path = None if isinstance(model, Embedder) else os.fspath(model)
        self.embedder = model if isinstance(model, Embedder) else load_embedder(model)
        self.catalogue = Catalogue(uri, collection, milvus_token, self.embedder.fingerprint,
                                   f"the model {self.embedder.source}", allow_mismatch,
                                   refresh_seconds, milvus_timeout)
        self.batcher = MicroBatcher(self._answer, max_batch, max_wait)
        self._warm_up()
        self._reranking = {}  # collection -> keras_dml Index, opened on first use
        self._milvus_token = milvus_token
        self._milvus_timeout = milvus_timeout
        self._reload_lock = threading.Lock()

    def _warm_up(self):
        """One forward pass and one search before the first request (tracing, first
        calls), so that request is not the slow one."""
        import io

        from PIL import Image

        encoded = io.BytesIO()
        Image.new("RGB", (64, 64), (128, 128, 128)).save(encoded, "PNG")
        results = self._answer([Query(image=encoded.getvalue(), k=1)])
        if isinstance(results[0], Exception) and not isinstance(results[0], ValueError):
            raise results[0]  # a broken model or an unreachable catalogue, not emptiness

    async def search(self, query):
        """`(ids, similarities, labels, metadata, rerank scores or None)` of one query
        (each a row of k)."""
        return await self.batcher.submit(query)

    def _answer(self, queries):
        """One result (or exception) per query: images embedded in one pass, then one
        Milvus search per distinct (k, expression); a re-ranked query on its own."""
        embedder = self.embedder
        images = [i for i, q in enumerate(queries) if q.image is not None]
        vectors = [q.vector for q in queries]
        results = [None] * len(queries)
        if images:
            for i, vector in zip(images, _each_alone(embedder.embed,
                                                     [queries[i].image for i in images])):
                if isinstance(vector, DecodeError):
                    results[i] = UploadError(str(vector))
                else:
                    vectors[i] = vector
        groups = {}
        for i, query in enumerate(queries):
            if results[i] is not None:
                continue
            if query.rerank is not None:
                try:
                    results[i] = self.rerank_search(vectors[i], query.k, query.filter,
                                                    query.rerank)
                except Exception as error:
                    results[i] = error
            else:
                groups.setdefault((query.k, query.expression), []).append(i)
        for (k, expression), members in groups.items():
            def search(rows, k=k, expression=expression):
                ids, scores, labels, metadata = self.catalogue.search(np.stack(rows), k,
                                                                      expression)
                return [(ids[r], scores[r], labels[r], metadata[r], None)
                        for r in range(len(rows))]

            for i, result in zip(members, _each_alone(search, [vectors[i] for i in members])):
                results[i] = result
        return results

    def rerank_search(self, vector, k, filter, rerank):
        """A re-ranked search (`keras_dml.index.Index.search(..., rerank=)`):
        `(ids, similarities, labels, metadata, rerank scores)`, the similarities
        the query's to each item as the catalogue's metric scores it (matches are
        decided on them). The collection opens as a keras_dml `Index` on first use
        (TensorFlow / JAX load then)."""
        from keras_dml.index import Index

        name = self.catalogue.collection
        if name not in self._reranking:
            self._reranking[name] = Index.open(self.catalogue.uri, name, self._milvus_token,
                                               timeout=self._milvus_timeout,
                                               call_timeout=self._milvus_timeout)
        index = self._reranking[name]
        vector = np.asarray(vector, np.float32)
        result = index.search(vector[None], k, filter=filter, rerank=rerank)
        found = result.scores[0] > -np.inf
        similarities = np.full(len(found), -np.inf, np.float32)
        if found.any():
            similarities[found] = _similarities(
                vector, index.get_embeddings(result.ids[0][found]), index.metric)
        return (result.ids[0], similarities, result.labels[0], result.metadata[0],
                result.scores[0])

    def reload(self):
        """Loads the model from its path again and checks it against the catalogue;
        returns None when ready, else why not.

        Raises:
            ValueError: The model was given as an object, not a path.
        """
        if self.model_path is None:
            raise ValueError("the service was given a model object, not a path: restart it.")
        with self._reload_lock:
            embedder = load_embedder(self.model_path)
            reason = self.catalogue.reload(embedder.fingerprint, f"the model {embedder.source}")
            self.embedder = embedder
            return reason

    def close(self):
        for index in self._reranking.values():
            index.close()
        self._reranking.clear()
        self.catalogue.close()


def _each_alone(function, items):
    """`function(items)`, a list of one result per item; when the call on the whole
    list fails, each item is tried alone, so a failure is only its own item's (an
    exception in its place). Milvus unreachable (ConnectionError, RuntimeError,
    TimeoutError) fails them all at once: each alone would fail too, slower."""
    try:
        return function(items)
    except (ConnectionError, RuntimeError, TimeoutError) as error:  # Milvus down: shared
        return [error] * len(items)
    except Exception as error:
        if len(items) == 1:
            return [error]
    results = []
    for item in items:
        try:
            results.extend(function([item]))
        except Exception as error:
            results.append(error)
    return results


def _similarities(query, items, metric):
    """The scores of `items` (rows) for `query` as `Index` defines them per metric."""
    if metric == "cosine":
        query = query / max(np.linalg.norm(query), 1e-12)
        items = items / np.maximum(np.linalg.norm(items, axis=1, keepdims=True), 1e-12)
    if metric == "euclidean":
        return -np.sum((items - query) ** 2, axis=1)
    return items @ query
