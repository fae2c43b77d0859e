"""TF Serving warm-up requests: `assets.extra/tf_serving_warmup_requests`.

TF Serving replays this TFRecord of `PredictionLog` protos when it loads a
version, so the first real request does not pay for graph initialisation. A
request that fails makes the version fail to load, which is why exports
replay them through the written SavedModel before publishing it.

The protos come from the `tensorflow-serving-api` package
(`pip install tensorflow-serving-api`).
"""

import numpy as np

from keras_dml import backend
from keras_dml.export.layout import WARMUP_PATH
from keras_dml.hyperparameters import integer_at_least

__all__ = ["predict_request", "read_warmup_requests", "require_serving_api", "synthetic_inputs",
           "write_warmup_requests"]

tf = backend.require_tensorflow("keras_dml.export (SavedModel and TF Serving export)")

_MISSING_API = (
    "Writing TF Serving warm-up requests needs the tensorflow-serving-api package "
    "(pip install tensorflow-serving-api), or pass warmup=False."
)


def require_serving_api():
    """The `tensorflow_serving.apis` proto modules, or a clear ImportError."""
    try:
        from tensorflow_serving.apis import predict_pb2, prediction_log_pb2
    except ImportError as error:
        raise ImportError(_MISSING_API) from error
    return predict_pb2, prediction_log_pb2


def predict_request(inputs, model_name, signature_name="serving_default"):
    """A `tensorflow_serving.apis.predict_pb2.PredictRequest`.

    Args:
        inputs: Dict of signature input name -> array (NumPy or tensor).
        model_name: `model_spec.name` (the server's `--model_name`).
        signature_name: Defaults to `"serving_default"`.

    Examples:

    >>> jpeg = tf.io.encode_jpeg(tf.zeros([8, 8, 3], tf.uint8)).numpy()
    >>> request = predict_request({"image_bytes": [jpeg]}, "embedder")
    >>> request.inputs["image_bytes"].dtype == tf.string.as_datatype_enum
    True
    """
    predict_pb2, _ = require_serving_api()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model_name
    request.model_spec.signature_name = signature_name
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def write_warmup_requests(export_dir, requests):
    """Writes `requests` (PredictRequests) as TF Serving's warm-up file; returns its path."""
    _, prediction_log_pb2 = require_serving_api()
    folder = tf.io.gfile.join(export_dir, WARMUP_PATH[0])
    tf.io.gfile.makedirs(folder)
    path = tf.io.gfile.join(folder, WARMUP_PATH[1])
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
            writer.write(log.SerializeToString())
    return path


def read_warmup_requests(export_dir):
    """The `PredictRequest`s of an export's warm-up file (empty list if it has none)."""
    _, prediction_log_pb2 = require_serving_api()
    path = tf.io.gfile.join(export_dir, *WARMUP_PATH)
    if not tf.io.gfile.exists(path):
        return []
    requests = []
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        requests.append(log.predict_log.request)
    return requests


def synthetic_inputs(serving_input, batch_sizes, seed=0):
    """Deterministic warm-up batches, one per batch size, as NumPy arrays.

    `"image_bytes"`: noise images encoded alternately as JPEG and PNG (both
    decoders get warmed). `"images"`: uniform noise in [0, 1) of the input shape.
    """
    rng = np.random.default_rng(seed)
    batches = []
    for size in _check_batch_sizes(batch_sizes):
        if serving_input.input_format == "image_bytes":
            channels = serving_input.preprocessing.channels
            batches.append(np.array(
                [_encode(rng.integers(0, 256, (48, 64, channels), dtype=np.uint8), i)
                 for i in range(size)], dtype=object))
        else:
            shape = serving_input.spec.shape[1:]
            if not shape.is_fully_defined():
                raise ValueError(
                    f"The model input {serving_input.spec.shape} has unknown dimensions: "
                    "pass preprocessing= (it fixes the image size) or warmup_inputs=."
                )
            batches.append(rng.random((size, *shape), dtype=np.float32)
                           .astype(serving_input.spec.dtype.as_numpy_dtype))
    return batches


def _encode(image, index):
    encode = tf.io.encode_jpeg if index % 2 == 0 else tf.io.encode_png
    return encode(image).numpy()


def _check_batch_sizes(batch_sizes):
    try:
        sizes = tuple(integer_at_least("warmup_batch_sizes", s, 1, strict=True)
                      for s in batch_sizes)
    except ValueError:
        sizes = ()
    if not sizes:
        raise ValueError(f"warmup_batch_sizes must be positive ints, got {batch_sizes!r}.")
    return sizes
