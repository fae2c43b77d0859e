"""A searchable, savable embedding index: `Index` (exact, faiss behind the `ann` extra, or a
Milvus collection behind the `milvus` extra), its filters and its provenance.

The names below load on first use, so a submodule that needs neither TensorFlow nor
JAX (`keras_dml.index.milvus`, `filters`, `provenance`: what `keras-dml serve` uses)
imports without them.
"""

import importlib

_LAZY = {"METRICS": "keras_dml.index.index", "Index": "keras_dml.index.index",
         "SearchResult": "keras_dml.index.index",
         "ModelMismatchError": "keras_dml.index.provenance",
         "model_fingerprint": "keras_dml.index.provenance"}

__all__ = ["BACKENDS", "METRICS", "Index", "ModelMismatchError", "SearchResult",
           "model_fingerprint"]


def __getattr__(name):
    if name == "BACKENDS":
        from keras_dml.index.backends import BACKENDS as memory

        globals()[name] = (*memory, "milvus")
        return globals()[name]
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'keras_dml.index' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
