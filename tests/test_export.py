"""Tests for keras_dml.export: TF Serving SavedModels checked without keras_dml.

The served-side checks run in one subprocess (tests/reference_export.py) that
blocks `import keras_dml`, loads every export with TensorFlow alone and answers
gRPC `PredictRequest`s and REST `:predict` bodies as tensorflow_model_server
does. The request code is executed from savedmodels/README.md itself.
"""

import base64
import importlib
import json
import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import export
from keras_dml.data import Preprocessing, decode_image
from keras_dml.export import layout, sidecar
from keras_dml.index import model_fingerprint
from keras_dml.layers import EmbeddingHead
from keras_dml.losses import ProxyAnchor
from keras_dml.models import DMLModel

from conftest import SHARED_DATASETS, require_shared_datasets

#: TensorFlow's `saved_model_cli`, run by this interpreter: found without PATH (a virtual
#: environment used by its python's full path is not activated).
SAVED_MODEL_CLI = (sys.executable, "-m", "tensorflow.python.tools.saved_model_cli")

ROOT = pathlib.Path(__file__).resolve().parents[1]
EMULATOR = ROOT / "tests" / "reference_export.py"
README = ROOT / "savedmodels" / "README.md"
CUB_IMAGES = pathlib.Path(SHARED_DATASETS) / "cub200_subset" / "CUB_200_2011" / "images"
PREP = Preprocessing(image_size=32, resize_size=40, normalization="symmetric")
DIM = 8
MATCH_THRESHOLD = 0.999  # only an image's own copy in the gallery scores above it


# -- fixtures ---------------------------------------------------------------------------


def _backbone_model(seed=0):
    """Tiny conv net on 32x32 images with BatchNorm and Dropout (inference mode matters)."""
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(6, 3, strides=2, activation="relu")(inputs)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.Dropout(0.5)(x)
    x = keras.layers.Conv2D(8, 3, activation="relu")(x)
    return inputs, EmbeddingHead(DIM)(x)


@pytest.fixture(scope="module")
def model():
    inputs, outputs = _backbone_model()
    model = keras.Model(inputs, outputs)
    # Non-trivial BatchNorm statistics, so training=True would give other numbers.
    bn = next(layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization))
    bn.moving_mean.assign(np.full(6, 0.3, np.float32))
    bn.moving_variance.assign(np.full(6, 2.0, np.float32))
    return model


def _smooth_image(rng, height, width, channels=3):
    """A photo-like image (smooth gradients + mild noise), so JPEG stays close."""
    yy, xx = np.mgrid[0:height, 0:width] / max(height, width)
    planes = [np.sin(rng.uniform(1, 6) * xx + rng.uniform(1, 6) * yy + rng.uniform(0, 6))
              for _ in range(channels)]
    image = (np.stack(planes, -1) + 1) * 110 + rng.normal(0, 8, (height, width, channels))
    return np.clip(image, 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def encoded():
    """Two real CUB photos (JPEG) and synthetic JPEG / PNG images of various sizes,
    one greyscale (expanded to RGB in the graph)."""
    require_shared_datasets()
    photos = sorted(CUB_IMAGES.glob("*/*.jpg"))
    rng = np.random.default_rng(1)
    images = [_smooth_image(rng, 60, 80), _smooth_image(rng, 33, 33), _smooth_image(rng, 90, 50),
              _smooth_image(rng, 41, 47, channels=1), _smooth_image(rng, 64, 64)]
    return [tf.io.encode_jpeg(images[0]).numpy(), tf.io.encode_png(images[1]).numpy(),
            tf.io.encode_jpeg(images[2]).numpy(), tf.io.encode_png(images[3]).numpy(),
            tf.io.encode_png(images[4]).numpy(), photos[0].read_bytes(), photos[-1].read_bytes()]


def _evaluation_tensor(encoded_images):
    """What the evaluation pipeline feeds the model: decode_image -> Preprocessing.eval."""
    return tf.stack([PREP.eval(decode_image(b, channels=3)) for b in encoded_images])


def _tiny_model(seed=0, size=4):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((size, size, 3)), keras.layers.Flatten(),
                             keras.layers.Dense(DIM)])


def _quick(model, base_dir, **kwargs):
    kwargs.setdefault("input_format", "images")
    kwargs.setdefault("warmup", False)
    kwargs.setdefault("verify", False)
    return export.export_embedder(model, base_dir, **kwargs)


def _snippet(name):
    text = README.read_text()
    match = re.search(rf"<!-- snippet: {name} -->\n```\w+\n(.*?)```", text, re.S)
    assert match, f"savedmodels/README.md has no snippet {name!r}"
    return match.group(1)


class _Sent(Exception):
    """Raised by the recording stubs: the README code got as far as sending."""


def _run_python_snippet(name, workdir, grpc_response=None, rest_reply=None):
    """Executes a README Python snippet in `workdir` with the network calls replaced.

    Without a response the stubs record what would be sent and stop the snippet;
    with one they return it, and the snippet's namespace is returned.
    """
    import requests
    from tensorflow_serving.apis import prediction_service_pb2_grpc

    sent = {}

    class Stub:
        def __init__(self, channel):
            pass

        def Predict(self, request, timeout=None):  # noqa: N802 - gRPC method name
            sent["request"] = request
            if grpc_response is None:
                raise _Sent
            return grpc_response

    class Reply:
        def json(self):
            return rest_reply

    def post(url, json=None, **kwargs):
        sent["url"], sent["json"] = url, json
        if rest_reply is None:
            raise _Sent
        return Reply()

    namespace = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prediction_service_pb2_grpc, "PredictionServiceStub", Stub)
        patch.setattr(requests, "post", post)
        patch.chdir(workdir)
        try:
            exec(compile(_snippet(name), f"README:{name}", "exec"), namespace)
        except _Sent:
            pass
    return sent, namespace


def _curl_body(workdir):
    """The -d payload of the README curl command, run by bash with curl replaced."""
    script = ('curl() { prev=; for a in "$@"; do [ "$prev" = -d ] && printf %s "$a" > body.json;'
              ' prev=$a; done; }\n' + _snippet("curl"))
    subprocess.run(["bash", "-c", script], cwd=workdir, check=True)
    return (pathlib.Path(workdir) / "body.json").read_text()


# -- the served exports, checked in one keras_dml-free subprocess -------------------------


@pytest.fixture(scope="module")
def served(model, encoded, tmp_path_factory):
    """Writes the exports, builds every request, runs the emulator once."""
    root = tmp_path_factory.mktemp("served")
    workdir = root / "client"
    workdir.mkdir()
    (workdir / "query.jpg").write_bytes(encoded[0])

    run_info = {"dataset": "synthetic", "loss": "multi_similarity", "epochs": 3}
    emb_bytes = export.export_embedder(model, root / "embedder", preprocessing=PREP,
                                       warmup_batch_sizes=(1, 3), run_info=run_info)
    emb_images = export.export_embedder(model, root / "embedder", input_format="images",
                                        preprocessing=PREP)
    gallery_images = _evaluation_tensor(encoded).numpy()
    labels = np.array(["cat", "dog", "owl", "cat", "eel", "jay", "tern"])
    retriever = export.export_retriever(
        model, root / "retriever", gallery_images=encoded, gallery_labels=labels, k=3,
        preprocessing=PREP, chunk_size=2)
    # Integer labels and a threshold between the self-match (1.0) and the rest.
    decider = export.export_retriever(
        model, root / "decider", gallery_images=encoded[1:], gallery_labels=np.arange(1, 7),
        k=2, preprocessing=PREP, threshold=MATCH_THRESHOLD, input_format="images")

    # The gallery-replacement route: a retriever version reusing the embedder export.
    gallery_embeddings = model.predict(_evaluation_tensor(encoded), verbose=0)
    regallery = export.export_gallery(emb_bytes, root / "retriever", gallery_embeddings,
                                      np.arange(10, 17), k=2, threshold=MATCH_THRESHOLD)

    def predict_job(job_id, export_dir, value, name="image_bytes"):
        request = export.predict_request({name: value}, "m")
        return {"id": job_id, "export_dir": str(export_dir), "type": "predict",
                "request": base64.b64encode(request.SerializeToString()).decode()}

    grpc_sent, _ = _run_python_snippet("grpc", workdir)
    rest_sent, _ = _run_python_snippet("rest", workdir)
    rest_retriever_sent, _ = _run_python_snippet("rest_retriever", workdir)
    grpc_decision_sent, _ = _run_python_snippet("grpc_decision", workdir)
    rest_decision_sent, _ = _run_python_snippet("rest_decision", workdir)
    curl_body = _curl_body(workdir)
    b64 = [{"b64": base64.b64encode(b).decode()} for b in encoded]
    wrong_shape = np.zeros((2, 16, 16, 3), np.float32)
    nan_images = gallery_images[:3].copy()
    nan_images[2] = np.nan
    jobs = [
        predict_job("bytes", emb_bytes, np.array(encoded, dtype=object)),
        predict_job("images", emb_images, gallery_images, name="images"),
        predict_job("retrieve", retriever, np.array(encoded, dtype=object)),
        {"id": "readme_grpc", "export_dir": str(emb_bytes), "type": "predict",
         "request": base64.b64encode(grpc_sent["request"].SerializeToString()).decode()},
        {"id": "readme_rest", "export_dir": str(emb_bytes), "type": "rest",
         "body": json.dumps(rest_sent["json"])},
        {"id": "readme_curl", "export_dir": str(emb_bytes), "type": "rest", "body": curl_body},
        {"id": "readme_rest_retriever", "export_dir": str(retriever), "type": "rest",
         "body": json.dumps(rest_retriever_sent["json"])},
        {"id": "rest_batch", "export_dir": str(emb_bytes), "type": "rest",
         "body": json.dumps({"instances": b64})},
        {"id": "rest_columnar", "export_dir": str(emb_bytes), "type": "rest",
         "body": json.dumps({"inputs": {"image_bytes": b64[:2]}})},
        {"id": "readme_grpc_decision", "export_dir": str(regallery), "type": "predict",
         "request": base64.b64encode(grpc_decision_sent["request"].SerializeToString()).decode()},
        {"id": "readme_rest_decision", "export_dir": str(regallery), "type": "rest",
         "body": json.dumps(rest_decision_sent["json"])},
        predict_job("regallery", regallery, np.array(encoded, dtype=object)),
        predict_job("regallery_empty", regallery, np.zeros([0], dtype=object)),
        {"id": "rest_retriever_batch", "export_dir": str(retriever), "type": "rest",
         "body": json.dumps({"instances": b64})},
        predict_job("bad_bytes", emb_bytes, np.array([encoded[0], b"not an image"], dtype=object)),
        predict_job("empty_bytes", emb_bytes, np.array([b""], dtype=object)),
        predict_job("truncated", emb_bytes, np.array([encoded[0][:300]], dtype=object)),
        predict_job("bad_dtype", emb_bytes, np.array([1.0, 2.0], np.float32)),
        predict_job("bad_shape", emb_images, wrong_shape, name="images"),
        predict_job("bad_images_dtype", emb_images, wrong_shape.astype(np.uint8), name="images"),
        predict_job("bad_channels", emb_images, gallery_images[:, :, :, :1], name="images"),
        predict_job("nan_image", emb_images, nan_images, name="images"),
        predict_job("truncated_png", emb_bytes,
                    np.array([encoded[0], encoded[1], encoded[1][:-20]], dtype=object)),
        predict_job("empty_request", emb_bytes, np.zeros([0], dtype=object)),
        predict_job("empty_images", emb_images, gallery_images[:0], name="images"),
        predict_job("empty_retrieve", retriever, np.zeros([0], dtype=object)),
        predict_job("retriever_truncated", retriever, np.array([encoded[0][:300]], dtype=object)),
        predict_job("decide", decider, gallery_images, name="images"),
        {"id": "decide_rest", "export_dir": str(decider), "type": "rest",
         "body": json.dumps({"instances": gallery_images[:2].tolist()})},
        {"id": "warmup_bytes", "export_dir": str(emb_bytes), "type": "warmup"},
        {"id": "warmup_images", "export_dir": str(emb_images), "type": "warmup"},
        {"id": "warmup_retriever", "export_dir": str(retriever), "type": "warmup"},
    ]
    jobs_path, results_path = root / "jobs.json", root / "results.json"
    jobs_path.write_text(json.dumps(jobs))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    # saved_model_cli runs alongside the emulator: each process pays for importing TF.
    cli = {name: subprocess.Popen([*SAVED_MODEL_CLI, "show", "--dir", str(path), "--all"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  env=env)
           for name, path in (("embedder", emb_bytes), ("retriever", retriever),
                              ("decider", decider))}
    subprocess.run([sys.executable, str(EMULATOR), str(jobs_path), str(results_path)],
                   check=True, cwd=root, timeout=300, env=env)
    results = json.loads(results_path.read_text())
    cli_output = {}
    for name, process in cli.items():
        cli_output[name] = process.communicate(timeout=300)[0]
        assert process.returncode == 0, f"saved_model_cli failed on the {name}"
    expected = model.predict(_evaluation_tensor(encoded), verbose=0)
    return {
        "results": results, "expected": expected, "labels": labels, "workdir": workdir,
        "grpc_request": grpc_sent["request"], "run_info": run_info, "cli": cli_output,
        "fingerprint": model_fingerprint(model),
        "decision_request": grpc_decision_sent["request"],
        "paths": {"bytes": emb_bytes, "images": emb_images, "retriever": retriever,
                  "decider": decider, "regallery": regallery},
    }


def _response(served, job_id):
    from tensorflow_serving.apis import predict_pb2

    result = served["results"][job_id]
    assert "error" not in result, result
    return predict_pb2.PredictResponse.FromString(base64.b64decode(result["response"]))


def _error(served, job_id):
    result = served["results"][job_id]
    assert "error" in result, f"{job_id} was expected to fail: {result}"
    return result["error"]


@pytest.mark.slow
def test_subprocess_never_imported_keras_dml(served):
    assert served["results"]["_modules"] == []


def test_image_bytes_embedding_equals_model_predict_on_evaluation_tensor(served):
    got = tf.make_ndarray(_response(served, "bytes").outputs["embedding"])
    assert got.dtype == np.float32 and got.shape == (7, DIM)
    np.testing.assert_allclose(got, served["expected"], atol=1e-5, rtol=0)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_images_input_embedding_equals_model_predict(served):
    got = tf.make_ndarray(_response(served, "images").outputs["embedding"])
    np.testing.assert_allclose(got, served["expected"], atol=1e-5, rtol=0)


def test_retriever_finds_each_gallery_image_and_matches_brute_force(served):
    response = _response(served, "retrieve")
    indices = tf.make_ndarray(response.outputs["indices"])
    labels = tf.make_ndarray(response.outputs["labels"])
    scores = tf.make_ndarray(response.outputs["scores"])
    gallery = served["expected"]
    similarity = gallery @ gallery.T
    reference = np.argsort(-similarity, axis=1, kind="stable")[:, :3]
    assert indices.dtype == np.int64 and indices.shape == (7, 3)
    np.testing.assert_array_equal(indices[:, 0], np.arange(7))
    np.testing.assert_allclose(scores, np.take_along_axis(similarity, indices, 1), atol=1e-5)
    np.testing.assert_allclose(scores, np.take_along_axis(similarity, reference, 1), atol=1e-5)
    assert labels.tolist() == served["labels"][indices].astype(bytes).tolist()
    assert np.all(np.diff(scores, axis=1) <= 1e-7)


def test_readme_grpc_snippet_round_trip(served):
    request = served["grpc_request"]
    assert request.model_spec.name == "embedder"
    assert request.model_spec.signature_name == "serving_default"
    response = _response(served, "readme_grpc")
    _, namespace = _run_python_snippet("grpc", served["workdir"], grpc_response=response)
    embedding = namespace["embedding"]
    assert embedding.shape == (1, DIM)
    np.testing.assert_allclose(embedding, served["expected"][:1], atol=1e-5, rtol=0)


def test_readme_rest_snippet_round_trip(served):
    reply = json.loads(served["results"]["readme_rest"]["body"])
    sent, namespace = _run_python_snippet("rest", served["workdir"], rest_reply=reply)
    assert sent["url"] == "http://localhost:8501/v1/models/embedder:predict"
    np.testing.assert_allclose(namespace["embedding"], served["expected"][0], atol=1e-5, rtol=0)


def test_readme_curl_body_is_what_tf_serving_accepts(served):
    reply = json.loads(served["results"]["readme_curl"]["body"])
    np.testing.assert_allclose(reply["predictions"], served["expected"][:1], atol=1e-5, rtol=0)


def test_readme_retriever_snippet_round_trip(served):
    reply = json.loads(served["results"]["readme_rest_retriever"]["body"])
    _, namespace = _run_python_snippet("rest_retriever", served["workdir"], rest_reply=reply)
    best = namespace["best"]
    assert sorted(best) == ["indices", "labels", "scores"]
    assert best["indices"][0] == 0 and best["labels"][0] == "cat"
    assert best["scores"][0] == pytest.approx(1.0, abs=1e-5)


def test_rest_batch_and_columnar_formats(served):
    rows = json.loads(served["results"]["rest_batch"]["body"])["predictions"]
    np.testing.assert_allclose(rows, served["expected"], atol=1e-5, rtol=0)
    columns = json.loads(served["results"]["rest_columnar"]["body"])["outputs"]
    np.testing.assert_allclose(columns, served["expected"][:2], atol=1e-5, rtol=0)
    predictions = json.loads(served["results"]["rest_retriever_batch"]["body"])["predictions"]
    assert [p["labels"][0] for p in predictions] == served["labels"].tolist()


def test_undecodable_bytes_error_names_the_element(served):
    assert "image_bytes[1] is not an encoded image (12 bytes)" in _error(served, "bad_bytes")
    assert "image_bytes[0] is not an encoded image (0 bytes)" in _error(served, "empty_bytes")
    assert "image_bytes[0] is a truncated JPEG (300 bytes, no EOI marker)" in _error(
        served, "truncated")
    assert "image_bytes[2] is a truncated PNG" in _error(served, "truncated_png")
    assert "image_bytes[0] is a truncated JPEG" in _error(served, "retriever_truncated")


def test_empty_requests_get_empty_answers(served):
    for job in ("empty_request", "empty_images"):
        embedding = tf.make_ndarray(_response(served, job).outputs["embedding"])
        assert embedding.shape == (0, DIM) and embedding.dtype == np.float32
    outputs = _response(served, "empty_retrieve").outputs
    assert {name: tf.make_ndarray(outputs[name]).shape for name in outputs} == {
        "indices": (0, 3), "labels": (0, 3), "scores": (0, 3)}


def test_readme_decision_snippets_round_trip(served):
    request = served["decision_request"]
    assert request.model_spec.name == "retriever"
    response = _response(served, "readme_grpc_decision")
    _, namespace = _run_python_snippet("grpc_decision", served["workdir"],
                                       grpc_response=response)
    assert namespace["match"] == 10 and namespace["is_match"]
    reply = json.loads(served["results"]["readme_rest_decision"]["body"])
    _, namespace = _run_python_snippet("rest_decision", served["workdir"], rest_reply=reply)
    assert namespace["match"] == 10 and namespace["is_match"] is True


def test_gallery_replaced_without_the_model_reuses_the_embedder_export(served):
    outputs = _response(served, "regallery").outputs
    indices = tf.make_ndarray(outputs["indices"])
    np.testing.assert_array_equal(indices[:, 0], np.arange(7))
    np.testing.assert_array_equal(tf.make_ndarray(outputs["match"]), np.arange(10, 17))
    similarity = served["expected"] @ served["expected"].T
    np.testing.assert_allclose(tf.make_ndarray(outputs["scores"]),
                               np.take_along_axis(similarity, indices, 1), atol=1e-5)
    assert tf.make_ndarray(_response(served, "regallery_empty").outputs["match"]).shape == (0,)
    info = export.read_export_info(served["paths"]["regallery"])
    assert info["retrieval"]["embedder"] == str(served["paths"]["bytes"])
    # the embedder's fingerprint carries over: the service checks it as the embedder's
    assert info["model_fingerprint"] == export.read_export_info(
        served["paths"]["bytes"])["model_fingerprint"]
    assert info["version"] == 2 and info["retrieval"]["threshold"] == MATCH_THRESHOLD
    assert info["inputs"]["image_bytes"]["preprocessing_in_graph"] is True


def test_non_finite_float_images_are_rejected_by_index(served):
    assert "images[2] has NaN or Inf values" in _error(served, "nan_image")


def test_retriever_with_threshold_returns_the_match_decision(served):
    outputs = _response(served, "decide").outputs
    assert sorted(outputs) == ["indices", "is_match", "labels", "match", "scores"]
    match = tf.make_ndarray(outputs["match"])
    is_match = tf.make_ndarray(outputs["is_match"])
    scores = tf.make_ndarray(outputs["scores"])
    labels = tf.make_ndarray(outputs["labels"])
    # Query 0 is not in the gallery (encoded[1:]); queries 1..6 find their own copy.
    gallery = served["expected"][1:]
    best = (served["expected"] @ gallery.T).max(axis=1)
    np.testing.assert_allclose(scores[:, 0], best, atol=1e-5)
    np.testing.assert_array_equal(is_match, best >= MATCH_THRESHOLD)
    np.testing.assert_array_equal(match, np.where(is_match, labels[:, 0], -1))
    assert match.dtype == np.int64 and match.tolist()[1:] == [1, 2, 3, 4, 5, 6]
    assert not is_match[0] and match[0] == -1
    rows = json.loads(served["results"]["decide_rest"]["body"])["predictions"]
    assert [row["match"] for row in rows] == [-1, 1]
    assert [row["is_match"] for row in rows] == [False, True]
    info = export.read_export_info(served["paths"]["decider"])
    assert info["retrieval"]["threshold"] == MATCH_THRESHOLD
    assert info["outputs"]["match"]["shape"] == [None]


def test_wrong_dtype_and_shape_errors_name_the_problem(served):
    assert "expected to be a string tensor but is a float tensor" in _error(served, "bad_dtype")
    assert "expected to be a float tensor but is a uint8 tensor" in _error(
        served, "bad_images_dtype")
    assert ("images must have shape (batch, 32, 32, 3), got shape [2,16,16,3]"
            in _error(served, "bad_shape"))
    assert ("images must have shape (batch, 32, 32, 3), got shape [7,32,32,1]"
            in _error(served, "bad_channels"))


def test_warmup_requests_replay_like_tf_serving(served):
    assert served["results"]["warmup_bytes"] == {"replayed": 2}
    assert served["results"]["warmup_images"] == {"replayed": 1}
    assert served["results"]["warmup_retriever"] == {"replayed": 1}
    requests = export.read_warmup_requests(served["paths"]["bytes"])
    assert [r.model_spec.signature_name for r in requests] == ["serving_default"] * 2
    sizes = [tf.make_ndarray(r.inputs["image_bytes"]).shape for r in requests]
    assert sizes == [(1,), (3,)]


def test_sidecar_describes_the_export(served):
    info = export.read_export_info(served["paths"]["bytes"])
    assert info["kind"] == "embedder" and info["version"] == 1
    assert info["inputs"]["image_bytes"]["dtype"] == "string"
    assert info["inputs"]["image_bytes"]["shape"] == [None]
    assert info["outputs"]["embedding"]["shape"] == [None, DIM]
    assert info["outputs"]["embedding"]["dtype"] == "float32"
    assert info["embedding_dim"] == DIM
    assert info["model_fingerprint"] == served["fingerprint"]
    assert Preprocessing.from_dict(info["preprocessing"]) == PREP
    # what the SavedModel does: the evaluation transform, no training flip or crop
    assert sorted(info["preprocessing"]) == ["channels", "image_size", "normalization",
                                             "resize_mode", "resize_size"]
    assert info["training_run"] == served["run_info"]
    assert info["warmup"]["batch_sizes"] == [1, 3]
    images = export.read_export_info(served["paths"]["images"])
    assert images["version"] == 2 and images["inputs"]["images"]["shape"] == [None, 32, 32, 3]
    assert images["inputs"]["images"]["preprocessing_in_graph"] is False
    retrieval = export.read_export_info(served["paths"]["retriever"])["retrieval"]
    assert retrieval["gallery_size"] == 7 and retrieval["k"] == 3
    assert retrieval["num_chunks"] == 4 and retrieval["label_dtype"] == "string"
    assert retrieval["threshold"] is None and retrieval["unknown_label"] == ""


def test_readme_sidecar_table_lists_every_key_written(served):
    """savedmodels/README.md's sidecar table names each key of every export's sidecar,
    and each key of the sections that have their own row."""
    section = README.read_text().split("## The sidecar `keras_dml_export.json`", 1)[1]
    rows = {}
    for line in section.split("\n## ", 1)[0].splitlines():
        if line.startswith("| `"):
            key_cell, content = line.split("|")[1:3]
            for key in re.findall(r"`(\w+)`", key_cell):
                rows[key] = set(re.findall(r"`(\w+)`", content))
    for path in served["paths"].values():
        info = export.read_export_info(path)
        assert set(info) <= set(rows), f"{path}: {sorted(set(info) - set(rows))} not in the table"
        for name in ("retrieval", "saved_variables", "warmup"):
            if info.get(name):
                missing = set(info[name]) - rows[name]
                assert not missing, f"{path}: {name} keys {sorted(missing)} not in the table"


def _tensor_info(output, kind, name):
    match = re.search(rf"{kind}\['{name}'\] tensor_info:\s+dtype: (\w+)\s+shape: (\([^)]*\))",
                      output)
    assert match, f"saved_model_cli lists no {kind} {name!r}"
    return match.groups()


def _output_names(output):
    """The output names saved_model_cli lists for `serving_default`."""
    signature = output.split("signature_def['serving_default']", 1)[1]
    signature = signature.split("Method name is:", 1)[0]
    return sorted(re.findall(r"outputs\['(\w+)'\] tensor_info", signature))


def test_saved_model_cli_lists_documented_signatures(served):
    embedder, retriever = served["cli"]["embedder"], served["cli"]["retriever"]
    for output in (embedder, retriever):
        assert "signature_def['serving_default']" in output
        assert _tensor_info(output, "inputs", "image_bytes") == ("DT_STRING", "(-1)")
        assert "Method name is: tensorflow/serving/predict" in output
    assert _tensor_info(embedder, "outputs", "embedding") == ("DT_FLOAT", f"(-1, {DIM})")
    assert _tensor_info(retriever, "outputs", "indices") == ("DT_INT64", "(-1, 3)")
    assert _tensor_info(retriever, "outputs", "labels") == ("DT_STRING", "(-1, 3)")
    assert _tensor_info(retriever, "outputs", "scores") == ("DT_FLOAT", "(-1, 3)")
    assert _output_names(retriever) == ["indices", "labels", "scores"]
    # The retriever exported with a threshold (integer labels, k=2, float images) also
    # returns the decision: match (the top label or -1) and is_match.
    decider = served["cli"]["decider"]
    assert "signature_def['serving_default']" in decider
    assert _tensor_info(decider, "inputs", "images") == ("DT_FLOAT", "(-1, 32, 32, 3)")
    assert _output_names(decider) == ["indices", "is_match", "labels", "match", "scores"]
    assert _tensor_info(decider, "outputs", "indices") == ("DT_INT64", "(-1, 2)")
    assert _tensor_info(decider, "outputs", "labels") == ("DT_INT64", "(-1, 2)")
    assert _tensor_info(decider, "outputs", "scores") == ("DT_FLOAT", "(-1, 2)")
    assert _tensor_info(decider, "outputs", "match") == ("DT_INT64", "(-1)")
    assert _tensor_info(decider, "outputs", "is_match") == ("DT_BOOL", "(-1)")


def _graph_ops(export_dir):
    """Every op of the SavedModel, including those inside functions (map_fn, while)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel.FromString(
        (pathlib.Path(export_dir) / "saved_model.pb").read_bytes())
    graph = proto.meta_graphs[0].graph_def
    ops = {node.op for node in graph.node}
    for function in graph.library.function:
        ops |= {node.op for node in function.node_def}
    return ops


def test_graph_has_only_tensorflow_ops(served):
    for path in served["paths"].values():
        ops = _graph_ops(path)
        assert not ops & {"PyFunc", "EagerPyFunc", "PyFuncStateless"}
    assert "DecodeImage" in _graph_ops(served["paths"]["bytes"])
    assert "TopKV2" in _graph_ops(served["paths"]["retriever"])


# -- variables: only the embedding network -------------------------------------------------


@pytest.fixture(scope="module")
def trained_dml():
    """A DMLModel trained one step with ProxyAnchor: it carries proxies and Adam state."""
    inputs, outputs = _backbone_model(seed=3)
    model = DMLModel(inputs, outputs)
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=ProxyAnchor(num_classes=7))
    x = np.random.default_rng(0).random((14, 32, 32, 3)).astype(np.float32)
    model.fit(x, np.arange(14) % 7, batch_size=14, epochs=1, verbose=0)
    return model, x


def _checkpoint_shapes(export_dir):
    names = tf.train.list_variables(os.path.join(export_dir, "variables", "variables"))
    return sorted(tuple(shape) for name, shape in names if "OBJECT_GRAPH" not in name)


def test_dmlmodel_export_leaves_out_proxies_and_optimizer(tmp_path, trained_dml):
    model, x = trained_dml
    assert any(tuple(w.shape) == (7, DIM) for w in model.weights)  # the proxies exist
    assert model.optimizer.variables

    path = export.export_embedder(model, tmp_path / "dml", input_format="images")
    embedder = model.embedder()
    assert _checkpoint_shapes(path) == sorted(tuple(w.shape) for w in embedder.weights)
    info = export.read_export_info(path)
    assert info["saved_variables"]["count"] == len(embedder.weights)
    # the fingerprint an index of the embedder's embeddings records
    assert info["model_fingerprint"] == model_fingerprint(embedder) == model_fingerprint(model)
    loaded = tf.saved_model.load(path).signatures["serving_default"]
    np.testing.assert_allclose(loaded(images=tf.constant(x[:4]))["embedding"],
                               model.predict(x[:4], verbose=0), atol=1e-5, rtol=0)


# -- layout and versions -------------------------------------------------------------------


def test_versions_increment_and_never_overwrite_silently(tmp_path):
    model = _tiny_model()
    base = tmp_path / "tiny"
    assert export.next_version(base) == 1
    first = _quick(model, base)
    assert pathlib.Path(first) == base / "1"
    assert {p.name for p in (base / "1").iterdir()} >= {
        "saved_model.pb", "variables", layout.SIDECAR_NAME}
    assert _quick(model, base, version=7) == str(base / "7")
    assert export.list_versions(base) == [1, 7]
    assert _quick(model, base) == str(base / "8")
    with pytest.raises(FileExistsError, match="7 already exists.*overwrite=True"):
        _quick(model, base, version=7)
    _quick(model, base, version=7, overwrite=True,
           run_info={"note": "second", "recall@1": np.float32(0.5), "r": np.arange(2)})
    assert export.read_export_info(base / "7")["training_run"] == {
        "note": "second", "recall@1": 0.5, "r": [0, 1]}
    assert sorted(p.name for p in base.iterdir()) == ["1", "7", "8"]  # no staging leftovers


@pytest.mark.parametrize("version", [0, -2, "3", 2.0, True])
def test_bad_version_is_a_value_error(tmp_path, version):
    with pytest.raises(ValueError, match="version must be a positive integer"):
        _quick(_tiny_model(), tmp_path / "m", version=version)


def test_failed_export_publishes_nothing(tmp_path, monkeypatch):
    def broken(export_dir, info):
        raise OSError("disk full")

    monkeypatch.setattr(sidecar, "write_export_info", broken)
    with pytest.raises(OSError, match="disk full"):
        _quick(_tiny_model(), tmp_path / "m")
    assert list((tmp_path / "m").iterdir()) == []


def test_verify_refuses_to_publish_a_mismatching_export(tmp_path, monkeypatch):
    # Keras' export imports tensorflow.saved_model.experimental, which puts a new module at
    # tf.saved_model (on the first export of the process): import it first so that the
    # patch below is the module verify_export reads.
    importlib.import_module("tensorflow.saved_model.experimental")
    real_load = tf.saved_model.load

    class Perturbed:
        def __init__(self, path):
            signature = real_load(path).signatures["serving_default"]
            self.signatures = {"serving_default": lambda **inputs: {
                name: value + 1.0 for name, value in signature(**inputs).items()}}

    monkeypatch.setattr(tf.saved_model, "load", Perturbed)
    with pytest.raises(RuntimeError, match="disagrees with the in-process model"):
        _quick(_tiny_model(), tmp_path / "m", verify=True)
    assert list((tmp_path / "m").iterdir()) == []


# -- argument validation -------------------------------------------------------------------


def test_image_bytes_needs_preprocessing_matching_the_model(tmp_path, model):
    with pytest.raises(ValueError, match="needs the evaluation preprocessing"):
        export.export_embedder(model, tmp_path / "m")
    with pytest.raises(ValueError, match=r"produces images of shape \(64, 64, 3\).*\(32, 32, 3\)"):
        export.export_embedder(model, tmp_path / "m", preprocessing=Preprocessing(image_size=64))
    with pytest.raises(ValueError, match="input_format must be one of"):
        export.export_embedder(model, tmp_path / "m", input_format="jpeg")
    with pytest.raises(ValueError, match="Unknown Preprocessing keys"):
        export.export_embedder(model, tmp_path / "m", preprocessing={"size": 32})


def test_bad_models_are_value_errors(tmp_path):
    inputs = keras.Input((4, 4, 3))
    flat = keras.layers.Flatten()(inputs)
    two = keras.Model(inputs, [keras.layers.Dense(2)(flat), keras.layers.Dense(3)(flat)])
    with pytest.raises(ValueError, match="one embedding tensor"):
        _quick(two, tmp_path / "m")
    vector = keras.Sequential([keras.Input((5,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match=r"image batch \(batch, H, W, C\), got shape \(None, 5\)"):
        _quick(vector, tmp_path / "m")
    unbuilt = keras.Sequential([keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="is not built"):
        _quick(unbuilt, tmp_path / "m")


class _Subclassed(keras.Model):
    def __init__(self):
        super().__init__(name="subclassed")
        self.flatten, self.dense = keras.layers.Flatten(), keras.layers.Dense(DIM)

    def call(self, x):
        return self.dense(self.flatten(x))


def test_subclassed_model_takes_its_input_shape_from_preprocessing(tmp_path):
    model = _Subclassed()
    model(np.zeros((1, 32, 32, 3), np.float32))
    with pytest.raises(ValueError, match="Cannot infer the input shape of _Subclassed"):
        _quick(model, tmp_path / "m")
    path = export.export_embedder(model, tmp_path / "m", preprocessing=PREP, warmup=False)
    encoded = [tf.io.encode_png(_smooth_image(np.random.default_rng(0), 50, 30)).numpy()]
    got = tf.saved_model.load(path).signatures["serving_default"](
        image_bytes=tf.constant(encoded))["embedding"]
    want = tf.math.l2_normalize(model(_evaluation_tensor(encoded)), axis=1)
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=0)


def test_bad_export_arguments_are_value_errors(tmp_path):
    model = _tiny_model()
    with pytest.raises(ValueError, match="run_info must be JSON-serialisable"):
        _quick(model, tmp_path / "m", run_info={"x": object()})
    with pytest.raises(ValueError, match="warmup_batch_sizes must be positive ints"):
        _quick(model, tmp_path / "m", warmup=True, warmup_batch_sizes=(1, 0))
    with pytest.raises(ValueError, match=r"warmup_inputs must be one non-empty batch.*\(3, 4, 3\)"):
        _quick(model, tmp_path / "m", warmup_inputs=np.zeros((3, 4, 3)))


def test_missing_serving_api_is_a_clear_import_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorflow_serving.apis", None)
    with pytest.raises(ImportError, match="pip install tensorflow-serving-api.*warmup=False"):
        _quick(_tiny_model(), tmp_path / "m", warmup=True)
    assert export.list_versions(tmp_path / "m") == []


def test_warmup_inputs_are_written_as_given(tmp_path):
    batch = np.random.default_rng(0).random((2, 4, 4, 3)).astype(np.float32)
    path = _quick(_tiny_model(), tmp_path / "m", warmup=True, warmup_inputs=batch)
    (request,) = export.read_warmup_requests(path)
    np.testing.assert_array_equal(tf.make_ndarray(request.inputs["images"]), batch)
    assert request.model_spec.name == "m"


def _retrieve(tmp_path, **kwargs):
    kwargs.setdefault("input_format", "images")
    kwargs.setdefault("warmup", False)
    kwargs.setdefault("verify", False)
    return export.export_retriever(_tiny_model(), tmp_path / "r", **kwargs)


def test_retriever_argument_errors(tmp_path):
    emb = np.random.default_rng(0).normal(size=(6, DIM))
    labels = np.arange(6)
    with pytest.raises(ValueError, match="exactly one of gallery_images and"):
        _retrieve(tmp_path, gallery_labels=labels)
    with pytest.raises(ValueError, match="exactly one of gallery_images and"):
        _retrieve(tmp_path, gallery_images=np.zeros((6, 4, 4, 3)), gallery_embeddings=emb,
                  gallery_labels=labels)
    with pytest.raises(ValueError, match="gallery_labels is required"):
        _retrieve(tmp_path, gallery_embeddings=emb)
    with pytest.raises(ValueError, match=r"k=7 exceeds the number of gallery items \(6\)"):
        _retrieve(tmp_path, gallery_embeddings=emb, gallery_labels=labels, k=7)
    with pytest.raises(ValueError, match=r"shape \(6,\), one label per gallery item, got \(5,\)"):
        _retrieve(tmp_path, gallery_embeddings=emb, gallery_labels=labels[:5])
    with pytest.raises(ValueError, match=rf"\(N >= 1, {DIM}\).*got \(6, 3\)"):
        _retrieve(tmp_path, gallery_embeddings=emb[:, :3], gallery_labels=labels)
    bad = emb.copy()
    bad[4, 1] = np.nan
    with pytest.raises(ValueError, match="NaN or Inf in 1 rows \\(first: row 4\\)"):
        _retrieve(tmp_path, gallery_embeddings=bad, gallery_labels=labels)
    with pytest.raises(ValueError, match="integers or strings, got fractional"):
        _retrieve(tmp_path, gallery_embeddings=emb, gallery_labels=labels + 0.5)
    with pytest.raises(ValueError, match=r"gallery_images must have shape \(N, 4, 4, 3\)"):
        _retrieve(tmp_path, gallery_images=np.zeros((6, 5, 5, 3)), gallery_labels=labels)
    with pytest.raises(ValueError, match="chunk_size must be a positive integer"):
        _retrieve(tmp_path, gallery_embeddings=emb, gallery_labels=labels, chunk_size=0)
    assert not (tmp_path / "r").exists()


def test_retriever_and_gallery_take_the_deprecated_reference_keywords(tmp_path):
    embeddings = np.random.default_rng(0).normal(size=(6, DIM))
    labels = np.arange(6) % 3

    def renamed(caught):
        return sorted(str(w.message) for w in caught if w.category is DeprecationWarning)

    with pytest.warns(DeprecationWarning) as caught:
        old = _retrieve(tmp_path / "old", reference_embeddings=embeddings,
                        reference_labels=labels, k=2)
    assert renamed(caught) == [
        "reference_embeddings= is deprecated and removed in 0.3: use gallery_embeddings=.",
        "reference_labels= is deprecated and removed in 0.3: use gallery_labels=."]
    new = _retrieve(tmp_path / "new", gallery_embeddings=embeddings, gallery_labels=labels, k=2)
    query = tf.constant(np.random.default_rng(1).random((3, 4, 4, 3)), tf.float32)
    answers = [tf.saved_model.load(path).signatures["serving_default"](images=query)
               for path in (old, new)]
    np.testing.assert_array_equal(answers[0]["indices"], answers[1]["indices"])
    np.testing.assert_array_equal(answers[0]["labels"], answers[1]["labels"])
    with pytest.raises(ValueError, match="Give gallery_labels= only"):
        _retrieve(tmp_path / "both", gallery_embeddings=embeddings, gallery_labels=labels,
                  reference_labels=labels[::-1])
    with pytest.warns(DeprecationWarning) as caught, \
            pytest.raises(FileNotFoundError, match="no-such-export"):
        export.export_gallery(tmp_path / "no-such-export", tmp_path / "g",
                              reference_embeddings=embeddings, reference_labels=labels)
    assert len(renamed(caught)) == 2
    with pytest.warns(DeprecationWarning, match="reference= is deprecated and removed in 0.3"), \
            pytest.raises(ValueError, match="Expected a .keras model file"):
        export.export_from_keras_file(tmp_path / "run.h5", tmp_path / "x", kind="retriever",
                                      reference={"gallery_embeddings": embeddings})


def test_retriever_from_embeddings_and_from_a_labelled_dataset(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.random((10, 4, 4, 3)).astype(np.float32)
    labels = np.arange(10) % 4
    model = _tiny_model()
    embeddings = model.predict(images, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices((images, labels))
    by_dataset = export.export_retriever(model, tmp_path / "d", gallery_images=dataset, k=4,
                                         input_format="images", batch_size=3, chunk_size=4)
    by_embeddings = export.export_retriever(model, tmp_path / "e", k=4, input_format="images",
                                            gallery_embeddings=embeddings * 3.0,
                                            gallery_labels=labels)
    query = tf.constant(images[:3])
    a = tf.saved_model.load(by_dataset).signatures["serving_default"](images=query)
    b = tf.saved_model.load(by_embeddings).signatures["serving_default"](images=query)
    np.testing.assert_array_equal(a["indices"], b["indices"])
    np.testing.assert_array_equal(a["labels"], labels[a["indices"].numpy()])
    assert a["labels"].dtype == tf.int64
    np.testing.assert_allclose(a["scores"], b["scores"], atol=1e-5)
    np.testing.assert_array_equal(a["indices"][:, 0], [0, 1, 2])


@pytest.mark.parametrize("chunk_size", [1, 3, 4, 9, 100])
def test_chunked_top_k_equals_a_stable_sort(chunk_size):
    rng = np.random.default_rng(chunk_size)
    gallery = rng.normal(size=(9, 5)).astype(np.float32)
    gallery /= np.linalg.norm(gallery, axis=1, keepdims=True)
    gallery[[4, 7]] = gallery[2]  # ties across chunks go to the lower index
    queries = np.concatenate([gallery[2:3], rng.normal(size=(3, 5))]).astype(np.float32)
    scores, indices = export.chunked_top_k(tf.constant(queries), tf.constant(gallery), 4,
                                           chunk_size)
    similarity = queries @ gallery.T
    reference = np.argsort(-similarity, axis=1, kind="stable")[:, :4]
    np.testing.assert_array_equal(indices, reference)
    np.testing.assert_allclose(scores, np.take_along_axis(similarity, reference, 1), atol=1e-6)
    assert indices.numpy()[0, :3].tolist() == [2, 4, 7]


# -- from a .keras file, and the CLI arguments ---------------------------------------------


def _cli_export(argv, capsys):
    """Runs `keras-dml export ARGV`; returns the version directory it printed."""
    from keras_dml import cli

    code = cli.main(["export", *map(str, argv)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return re.search(r"SavedModel: (\S+)", out).group(1)


@pytest.mark.slow
def test_export_from_keras_file_via_cli_arguments(tmp_path, trained_dml, capsys):
    model, _ = trained_dml
    keras_path = tmp_path / "run.keras"
    model.save(keras_path)
    (tmp_path / "run.json").write_text(json.dumps({"epochs": 2}))
    path = _cli_export([
        keras_path, tmp_path / "cli", "--image-size", "32", "--resize-size", "40",
        "--normalization", "symmetric", "--warmup-batch-sizes", "1,2",
        "--run-info", tmp_path / "run.json"], capsys)
    info = export.read_export_info(path)
    assert info["saved_variables"]["count"] == len(model.embedder().weights)
    assert Preprocessing.from_dict(info["preprocessing"]) == PREP
    assert info["training_run"] == {"epochs": 2} and info["warmup"]["batch_sizes"] == [1, 2]

    images = np.random.default_rng(0).random((6, 32, 32, 3)).astype(np.float32)
    np.savez(tmp_path / "gallery.npz", images=images, labels=np.arange(6))
    path = _cli_export([keras_path, tmp_path / "cli", "--version", "5",
                        "--input-format", "images", "--reference", tmp_path / "gallery.npz",
                        "--k", "2", "--no-warmup"], capsys)
    assert path == str(tmp_path / "cli" / "5")
    served = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(images))
    np.testing.assert_array_equal(served["indices"][:, 0], np.arange(6))

    paths = []
    for i in range(3):
        paths.append(str(tmp_path / f"g{i}.png"))
        pathlib.Path(paths[-1]).write_bytes(tf.io.encode_png(
            _smooth_image(np.random.default_rng(i), 40, 40)).numpy())
    np.savez(tmp_path / "files.npz", paths=np.array(paths), labels=np.array(["a", "b", "c"]))
    path = _cli_export([keras_path, tmp_path / "cli", "--reference", tmp_path / "files.npz",
                        "--k", "1", "--image-size", "32", "--resize-size", "40",
                        "--normalization", "symmetric"], capsys)
    assert path == str(tmp_path / "cli" / "6")
    query = tf.constant([pathlib.Path(p).read_bytes() for p in paths])
    served = tf.saved_model.load(path).signatures["serving_default"](image_bytes=query)
    assert served["labels"].numpy()[:, 0].tolist() == [b"a", b"b", b"c"]

    from keras_dml import cli

    assert cli.main(["export", str(keras_path), str(tmp_path / "x"), "--preprocessing", path,
                     "--image-size", "32"]) == 2
    assert "either --preprocessing or the individual" in capsys.readouterr().err
    with pytest.raises(ValueError, match="Expected a .keras model file"):
        export.export_from_keras_file(tmp_path / "run.h5", tmp_path / "x")
    with pytest.raises(ValueError, match="gallery= is required for kind='retriever'"):
        export.export_from_keras_file(keras_path, tmp_path / "x", kind="retriever")


_JAX_EXPORT = """
import sys
import keras, numpy as np, keras_dml
inputs = keras.Input((6,))
model = keras_dml.models.DMLModel(inputs, keras_dml.layers.EmbeddingHead(4)(inputs))
model.compile(optimizer="adam", loss=keras_dml.losses.MultiSimilarity())
x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
model.fit(x, np.repeat(np.arange(4), 4), batch_size=16, verbose=0)
embedder = model.embedder()
embedder.export(sys.argv[1], format="tf_saved_model", verbose=False)
np.savez(sys.argv[2], x=x, embeddings=np.asarray(embedder(x)))
"""


@pytest.mark.slow  # a JAX process
def test_a_jax_trained_embedder_exports_a_saved_model_through_jax2tf(tmp_path):
    """Keras' `export` from the JAX backend (jax2tf, TensorFlow installed) serves the
    embeddings the JAX model computes."""
    pytest.importorskip("jax")
    saved, outputs = tmp_path / "saved", tmp_path / "outputs.npz"
    environment = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2")
    run = subprocess.run([sys.executable, "-c", _JAX_EXPORT, str(saved), str(outputs)],
                         env=environment, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    expected = np.load(outputs)
    loaded = tf.saved_model.load(str(saved))  # kept: its variables live as long as it
    # embedder() keeps the model's input structure: one input, one tensor (not a list)
    served = loaded.serve(tf.constant(expected["x"]))
    np.testing.assert_allclose(served.numpy(), expected["embeddings"], atol=1e-6)


def test_keras_dml_export_of_a_run_names_the_run_in_training_run(tmp_path):
    """`keras-dml export RUN` fills the sidecar's `training_run` from the run folder; a
    `--run-info` file's values win; a model outside a run keeps the file's dict (or None)."""
    from keras_dml.cli.export import training_run

    run = tmp_path / "runs" / "birds"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "config": {"dataset": "cub", "loss": "multi_similarity"}, "recall_after": {"1": 0.5}}))
    assert training_run(str(run / "model.keras")) == {
        "run": str(run), "dataset": "cub", "loss": "multi_similarity",
        "recall_after": {"1": 0.5}}
    (tmp_path / "info.json").write_text(json.dumps({"run": "elsewhere", "epochs": 3}))
    assert training_run(str(run / "model.keras"), tmp_path / "info.json")["run"] == "elsewhere"
    assert training_run(str(tmp_path / "m.keras")) is None
    assert training_run(str(tmp_path / "m.keras"), tmp_path / "info.json") == {
        "run": "elsewhere", "epochs": 3}
