"""A stand-in for TF Serving's Predict handlers, run in a process without keras_dml.

`python tests/reference_export.py JOBS.json RESULTS.json` loads each SavedModel
with nothing but TensorFlow (importing keras_dml is blocked, and its absence
from `sys.modules` is checked at the end), answers each job the way
`tensorflow_model_server` does, and writes the answers:

- `{"type": "predict", "request": <base64 PredictRequest>}` ->
  `{"response": <base64 PredictResponse>}` (the gRPC API);
- `{"type": "rest", "body": <JSON text>}` -> `{"body": <JSON text>}` (the REST
  `:predict` API, row "instances" and columnar "inputs" formats, `{"b64": ...}`
  binary values, `_bytes` output naming);
- `{"type": "warmup"}` replays the export's `assets.extra` warm-up requests
  as the server does at load time -> `{"replayed": <count>}`;
- a failing job gives `{"error": <message>}`, like the server's error status.

Each job names its `export_dir`; each SavedModel is loaded once.
"""

import base64
import importlib.abc
import json
import sys


class _BlockKerasDml(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "keras_dml" or name.startswith("keras_dml."):
            raise ImportError(f"{name} must not be needed to serve an export")
        return None


def _signature(loaded, name):
    name = name or "serving_default"
    if name not in loaded.signatures:
        raise ValueError(f"Serving signature name: \"{name}\" not found in signature def")
    return loaded.signatures[name]


def _run(signature, inputs):
    expected = set(signature.structured_input_signature[1])
    if set(inputs) != expected:
        raise ValueError(f"input tensor alias mismatch: got {sorted(inputs)}, "
                         f"signature expects {sorted(expected)}")
    return {name: value.numpy() for name, value in signature(**inputs).items()}


def predict(loaded, request):
    """PredictRequest -> PredictResponse through the loaded signature."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    signature = _signature(loaded, request.model_spec.signature_name)
    inputs = {name: tf.constant(tf.make_ndarray(proto)) for name, proto in request.inputs.items()}
    outputs = _run(signature, inputs)
    response = predict_pb2.PredictResponse()
    response.model_spec.CopyFrom(request.model_spec)
    wanted = set(request.output_filter) or set(outputs)
    for name in wanted:
        response.outputs[name].CopyFrom(tf.make_tensor_proto(outputs[name]))
    return response


def _decode_json_value(value):
    """Nested JSON value with `{"b64": ...}` objects -> nested Python value."""
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise ValueError(f"Unexpected JSON object {value}; only {{\"b64\": ...}} is a value")
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decode_json_value(v) for v in value]
    return value


def _tensor(value, spec):
    import numpy as np
    import tensorflow as tf

    array = np.array(value, dtype=object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype)
    return tf.constant(array, dtype=spec.dtype)


def _encode_json_value(name, value):
    if isinstance(value, list):
        return [_encode_json_value(name, v) for v in value]
    if isinstance(value, bytes):
        if name.endswith("_bytes"):
            return {"b64": base64.b64encode(value).decode()}
        return value.decode("utf-8")
    return value


def rest_predict(loaded, body):
    """REST :predict JSON body (dict) -> response dict, as tensorflow_model_server builds it."""
    signature = _signature(loaded, body.get("signature_name"))
    specs = signature.structured_input_signature[1]
    if ("instances" in body) == ("inputs" in body):
        raise ValueError("JSON request must have exactly one of 'instances' or 'inputs'")
    row = "instances" in body
    if row:
        instances = body["instances"]
        if len(specs) == 1:
            (name,) = specs
            values = {name: [inst[name] if isinstance(inst, dict) and name in inst else inst
                             for inst in instances]}
        else:
            values = {name: [inst[name] for inst in instances] for name in specs}
    else:
        columns = body["inputs"]
        if isinstance(columns, dict) and set(columns) == set(specs):
            values = columns
        elif len(specs) == 1:
            values = {next(iter(specs)): columns}
        else:
            raise ValueError(f"'inputs' must be an object with keys {sorted(specs)}")
    inputs = {name: _tensor(_decode_json_value(v), specs[name]) for name, v in values.items()}
    outputs = {name: value.tolist() for name, value in _run(signature, inputs).items()}
    outputs = {name: _encode_json_value(name, value) for name, value in outputs.items()}
    if not row:
        return {"outputs": next(iter(outputs.values())) if len(outputs) == 1 else outputs}
    if len(outputs) == 1:
        return {"predictions": next(iter(outputs.values()))}
    names = sorted(outputs)
    return {"predictions": [dict(zip(names, values))
                            for values in zip(*(outputs[n] for n in names))]}


def replay_warmup(loaded, export_dir):
    """Runs every warm-up record like TF Serving's SavedModel warm-up; returns the count."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    path = f"{export_dir}/assets.extra/tf_serving_warmup_requests"
    count = 0
    for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
        log = prediction_log_pb2.PredictionLog.FromString(record)
        if log.WhichOneof("log_type") != "predict_log":
            raise ValueError(f"Unsupported warm-up log type {log.WhichOneof('log_type')}")
        predict(loaded, log.predict_log.request)
        count += 1
    return count


def _answer(loaded, job):
    from tensorflow_serving.apis import predict_pb2

    if job["type"] == "predict":
        request = predict_pb2.PredictRequest.FromString(base64.b64decode(job["request"]))
        response = predict(loaded, request)
        return {"response": base64.b64encode(response.SerializeToString()).decode()}
    if job["type"] == "rest":
        return {"body": json.dumps(rest_predict(loaded, json.loads(job["body"])))}
    if job["type"] == "warmup":
        return {"replayed": replay_warmup(loaded, job["export_dir"])}
    raise ValueError(f"Unknown job type {job['type']!r}")


def main(jobs_path, results_path):
    sys.meta_path.insert(0, _BlockKerasDml())
    import tensorflow as tf

    with open(jobs_path) as f:
        jobs = json.load(f)
    models, results = {}, {}
    for job in jobs:
        export_dir = job["export_dir"]
        if export_dir not in models:
            models[export_dir] = tf.saved_model.load(export_dir)
        try:
            results[job["id"]] = _answer(models[export_dir], job)
        except Exception as error:  # noqa: BLE001 - reported like the server's error status
            results[job["id"]] = {"error": f"{type(error).__name__}: {error}"}
    results["_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "keras_dml")
    with open(results_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main(*sys.argv[1:])
