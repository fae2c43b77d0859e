"""`keras-dml index`, `search` and `calibrate` end to end on a small digits run."""

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

from keras_dml import cli, datasets, export
from keras_dml.evaluation import pair_scores
from keras_dml.index import Index
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel

EMULATOR = pathlib.Path(__file__).resolve().parent / "reference_export.py"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A run directory as `keras-dml train` leaves it (untrained model: the commands'
    plumbing is under test, not the embedding)."""
    root = tmp_path_factory.mktemp("runs") / "digits-run"
    root.mkdir()
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 1))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = DMLModel(inputs, EmbeddingHead(6)(x))
    model.save(root / "model.keras")
    (root / "summary.json").write_text(json.dumps({"config": {"dataset": "digits"}}))
    return root


def _served_outputs(export_dir, images, workdir):
    """The columnar REST answer of `export_dir` to `images`, from tests/reference_export.py:
    TensorFlow alone, with `import keras_dml` blocked."""
    jobs, results = workdir / "jobs.json", workdir / "results.json"
    jobs.write_text(json.dumps([{"id": "decide", "export_dir": str(export_dir), "type": "rest",
                                 "body": json.dumps({"inputs": images.tolist()})}]))
    subprocess.run([sys.executable, str(EMULATOR), str(jobs), str(results)], check=True,
                   timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    answer = json.loads(results.read_text())
    assert answer["_modules"] == [] and "error" not in answer["decide"], answer
    return {name: np.asarray(value)
            for name, value in json.loads(answer["decide"]["body"])["outputs"].items()}


def _main(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_index_search_calibrate_export(run_dir, tmp_path, capsys):
    out = _main(["index", run_dir], capsys)
    test = datasets.load("digits").test
    assert f"({len(test.labels)} items, dimension 6, exact)" in out
    index = Index.load(run_dir / "index")
    np.testing.assert_array_equal(index.labels, test.labels)
    assert cli.main(["index", str(run_dir)]) == 2  # never overwritten unasked
    assert "--overwrite" in capsys.readouterr().err

    out = _main(["calibrate", run_dir, "--target-precision", "0.6", "--export",
                 tmp_path / "retriever", "--k", "3"], capsys)
    calibration = json.loads((run_dir / "calibration" / "calibration.json").read_text())
    threshold = calibration["threshold"]
    scores, same = pair_scores(index.embeddings, index.labels)
    assert same[scores >= threshold].mean() >= 0.6  # the target holds on the calibration set
    assert calibration["achieved"]["precision"] == pytest.approx(same[scores >= threshold].mean())
    for name in ("threshold_table.csv", "verification_curves.png", "score_histograms.png"):
        assert (run_dir / "calibration" / name).stat().st_size > 0
    path = re.search(r"retriever with threshold: (\S+)", out).group(1)

    paths = []
    for i in (0, 7):
        paths.append(tmp_path / f"q{i}.png")
        image = np.round(test.images[i] * 255).astype(np.uint8)
        paths[-1].write_bytes(tf.io.encode_png(image).numpy())
    out = _main(["search", run_dir / "index", *paths, "--k", "2", "--threshold", "calibrated"],
                capsys)
    images = np.stack([np.round(test.images[i] * 255) / 255 for i in (0, 7)]).astype(np.float32)
    model = keras.saving.load_model(run_dir / "model.keras")
    queries = model.predict(images, verbose=0)
    expected = index.search(queries, 2)
    printed = [int(m) for m in re.findall(r"^\s+1\. id (\d+)", out, re.M)]
    assert printed == expected.ids[:, 0].tolist()
    matches = [int(m) for m in re.findall(r"match: (-?\d+)", out)]
    assert matches == index.match(queries, threshold).tolist()
    first_labels = re.findall(r"^\s+1\. id \d+\s+label (\d+) \((.+?)\)", out, re.M)
    assert first_labels == [(str(label), test.class_names[label])
                            for label in expected.labels[:, 0]]  # the class's name, not only its id
    assert export.read_export_info(path)["retrieval"]["threshold"] == threshold

    # The calibrated retriever, served by a process without keras_dml: its signature
    # returns the decision, equal to Index.match at the calibrated threshold. Held-out
    # copies of the gallery and images of the training digits (not in the gallery).
    train = datasets.load("digits").train
    served_images = np.concatenate([images, train.images[:6]]).astype(np.float32)
    served_queries = model.predict(served_images, verbose=0)
    outputs = _served_outputs(path, served_images, tmp_path)
    assert sorted(outputs) == ["indices", "is_match", "labels", "match", "scores"]
    # The untrained embedder scores everything near 1, so neighbours can tie within float
    # error: the served top-3 is checked as a top-3 (its scores are the exact search's and
    # the similarities of the rows it names), not id by id.
    top = index.search(served_queries, 3)
    np.testing.assert_allclose(outputs["scores"], top.scores, atol=1e-6)
    similarity = served_queries @ index.embeddings.T
    np.testing.assert_allclose(outputs["scores"],
                               np.take_along_axis(similarity, outputs["indices"], 1), atol=1e-6)
    np.testing.assert_array_equal(outputs["labels"], index.labels[outputs["indices"]])
    best = outputs["scores"][:, 0].astype(np.float32)  # compared in float32, as in the graph
    threshold = np.float32(threshold)
    np.testing.assert_array_equal(outputs["is_match"], best >= threshold)
    np.testing.assert_array_equal(outputs["match"],
                                  np.where(best >= threshold, outputs["labels"][:, 0], -1))
    clear = np.abs(top.scores[:, 0] - threshold) > 1e-6  # no float-error side of the threshold
    np.testing.assert_array_equal(outputs["match"][clear],
                                  index.match(served_queries, threshold)[clear])
