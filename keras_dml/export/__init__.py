"""Export for TF Serving: embedder and in-graph retrieval SavedModels.

Each export is a TF Serving version directory `base_dir/<version>/` with
`saved_model.pb`, `variables/`, the warm-up file
`assets.extra/tf_serving_warmup_requests` and the JSON sidecar
`keras_dml_export.json`. The SavedModels use TensorFlow ops only and load
without keras_dml (or Python) in `tensorflow_model_server`.

The modules follow an export's path, in order: `load` (model and gallery
files) -> `inputs` (the serving input: decoding and checks) -> `embed` (the
network as a function) -> `gallery` (retriever: the gallery, exact top-k and
the match decision) -> `writer` (SavedModel, warm-up, sidecar, with `layout`,
`warmup`, `sidecar`) -> `verify` (reload and replay before publishing).
`exporters` holds the entry points that run these steps.
"""

from keras_dml.export.exporters import (
    export_embedder,
    export_from_keras_file,
    export_gallery,
    export_retriever,
)
from keras_dml.export.gallery import chunked_top_k
from keras_dml.export.layout import list_versions, next_version
from keras_dml.export.load import load_gallery_file, load_keras_model
from keras_dml.export.sidecar import read_export_info
from keras_dml.export.warmup import predict_request, read_warmup_requests

__all__ = [
    "chunked_top_k",
    "export_embedder",
    "export_from_keras_file",
    "export_gallery",
    "export_retriever",
    "list_versions",
    "load_gallery_file",
    "load_keras_model",
    "next_version",
    "predict_request",
    "read_export_info",
    "read_warmup_requests",
]
