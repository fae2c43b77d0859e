"""A searchable, savable embedding index: `Index` (exact, or faiss behind the `ann` extra)."""

from keras_dml.index.backends import BACKENDS
from keras_dml.index.index import METRICS, Index, SearchResult
from keras_dml.index.provenance import ModelMismatchError, model_fingerprint

__all__ = ["BACKENDS", "METRICS", "Index", "ModelMismatchError", "SearchResult",
           "model_fingerprint"]
