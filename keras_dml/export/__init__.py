"""Export for TF Serving: embedder and in-graph retrieval SavedModels.

Each export is a TF Serving version directory `base_dir/<version>/` with
`saved_model.pb`, `variables/`, the warm-up file
`assets.extra/tf_serving_warmup_requests` and the JSON sidecar
`keras_dml_export.json`. The SavedModels use TensorFlow ops only and load
without keras_dml (or Python) in `tensorflow_model_server`.
"""

from keras_dml.export.embedder import export_embedder
from keras_dml.export.keras_file import (
    add_export_arguments,
    export_from_args,
    export_from_keras_file,
    load_keras_model,
)
from keras_dml.export.layout import list_versions, next_version
from keras_dml.export.retriever import chunked_top_k, export_retriever
from keras_dml.export.sidecar import read_export_info
from keras_dml.export.warmup import predict_request, read_warmup_requests

__all__ = [
    "add_export_arguments",
    "chunked_top_k",
    "export_embedder",
    "export_from_args",
    "export_from_keras_file",
    "export_retriever",
    "list_versions",
    "load_keras_model",
    "next_version",
    "predict_request",
    "read_export_info",
    "read_warmup_requests",
]
