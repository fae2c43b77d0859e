"""A searchable, savable embedding index: `Index` (exact, faiss behind the `ann` extra, or a
Milvus collection behind the `milvus` extra), its filters and its provenance."""

from keras_dml.index.backends import BACKENDS as MEMORY_BACKENDS
from keras_dml.index.index import METRICS, Index, SearchResult
from keras_dml.index.provenance import ModelMismatchError, model_fingerprint

BACKENDS = (*MEMORY_BACKENDS, "milvus")

__all__ = ["BACKENDS", "METRICS", "Index", "ModelMismatchError", "SearchResult",
           "model_fingerprint"]
