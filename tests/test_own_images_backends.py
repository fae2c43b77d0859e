"""The own-images road on the running Keras backend (TensorFlow, JAX or PyTorch): a folder
of real CUB photos trained on, evaluated, indexed and searched, in Python and from the
command line. Image files are decoded by TensorFlow's tf.data pipeline, which CI's JAX
and PyTorch runs have installed; the model runs on the backend under test."""

import json
import os
import warnings

import keras
import numpy as np
import pytest
from conftest import BACKEND, SHARED_DATASETS, require_shared_datasets
from PIL import Image

from keras_dml import cli, data, datasets, evaluation, models
from keras_dml.callbacks import RecallAtK
from keras_dml.index import Index

pytestmark = [pytest.mark.backend_neutral,
              pytest.mark.requires("tensorflow")]  # tf.data decodes the image files

CUB_IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")
PREP = data.Preprocessing(image_size=32, resize_size=40)  # not keras-dml train's 37 for 32
CLASSES, PER_CLASS = 4, 6


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """`root/<species>/<photo>.jpg`: 6 real CUB photos of 4 species each, at 48 px."""
    require_shared_datasets()
    root = tmp_path_factory.mktemp("photos")
    for species in sorted(os.listdir(CUB_IMAGES))[:CLASSES]:
        os.makedirs(root / species)
        for name in sorted(os.listdir(os.path.join(CUB_IMAGES, species)))[:PER_CLASS]:
            with Image.open(os.path.join(CUB_IMAGES, species, name)) as image:
                image.convert("RGB").resize((48, 48)).save(root / species / name)
    return str(root)


def small_model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(4, 3, strides=2, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = models.DMLModel(inputs, keras.layers.Dense(8)(x))
    model.compile(optimizer="adam", loss="MultiSimilarity")
    return model


@pytest.fixture(scope="module")
def trained(photos):
    """`(splits, model)`: the model fitted 2 steps on the training species, which
    records `PREP` (the training stream's)."""
    splits = datasets.from_directory(photos, test_classes=0.5, seed=0)
    model = small_model()
    model.fit(data.class_balanced_batches(splits.train, 2, 2, preprocessing=PREP, seed=0),
              epochs=1, steps_per_epoch=2, verbose=0)
    return splits, model


def test_python_road_embeds_evaluates_indexes_and_searches_image_files(trained):
    splits, model = trained
    assert model.preprocessing == PREP
    embedder = model.embedder()
    stream = data.evaluation_batches(splits.test, PREP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reference, labels = evaluation.embed_dataset(model, stream)
        callback = RecallAtK(stream, ks=(1,), verbose=0)
        callback.set_model(model)
        logs = callback.evaluate()
        metrics = evaluation.evaluate_retrieval(model, stream, ks=(1,))
        # the split itself: its files prepared as the model records, not a default
        from_split, _ = evaluation.embed_dataset(embedder, splits.test)
        index = Index.from_model(embedder, splits.test, verbose=0)
    # no note: of an inputs structure (PyTorch), of a default preprocessing, or of a mismatch
    assert [str(w.message) for w in caught if issubclass(w.category, UserWarning)] == []
    assert reference.shape == (CLASSES * PER_CLASS // 2, 8)
    np.testing.assert_array_equal(labels, splits.test.labels)
    assert logs["val_recall@1"] == pytest.approx(metrics["recall@1"])
    np.testing.assert_allclose(from_split, reference, atol=1e-5)
    np.testing.assert_allclose(index.embeddings, reference, atol=1e-5)
    found = index.search(reference[:3], k=1)
    assert [m[0] for m in found.metadata] == splits.test.paths[:3]


def test_unrecorded_preprocessing_is_named_and_is_keras_dml_trains(trained):
    splits, model = trained
    plain = keras.Model(model.input, model.output)  # records nothing
    with pytest.warns(UserWarning, match=r"records no preprocessing.*resize to 37 x 37, "
                      r"centre crop 32"):
        assumed = Index.from_model(plain, splits.test, verbose=0).embeddings
    recorded = Index.from_model(model.embedder(), splits.test, verbose=0).embeddings
    # resize 37, not the model's 40: a difference on the embeddings' own scale (an
    # untrained head's outputs can be as small as 1e-4)
    assert np.abs(assumed - recorded).max() > 0.01 * np.abs(recorded).max()
    with pytest.warns(UserWarning, match=r"prepared as resize to 64 x 64.*trained on resize "
                      r"to 40 x 40"):
        evaluation.embed_dataset(model, data.evaluation_batches(
            splits.test, data.Preprocessing(image_size=32, resize_size=64)))


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the export runs on TensorFlow")
def test_export_off_tensorflow_is_one_line_naming_the_command(trained, tmp_path):
    from keras_dml import backend
    from keras_dml.export import export_embedder

    with pytest.raises(backend.TensorFlowBackendRequiredError,
                       match=f"Keras runs on {BACKEND} here: .*KERAS_BACKEND=tensorflow "
                             "keras-dml export RUN"):
        export_embedder(trained[1].embedder(), str(tmp_path / "export"))
    assert not os.path.exists(tmp_path / "export")


@pytest.mark.slow  # 19 s on JAX (its jit compiles), 6 s on TensorFlow
def test_command_line_road_trains_on_a_folder_then_indexes_and_searches(photos, tmp_path,
                                                                         capsys):
    runs = tmp_path / "runs"
    assert cli.main(["train", "--data-dir", photos, "--epochs", "1", "--steps-per-epoch", "2",
                     "--image-size", "32", "--classes-per-batch", "2", "--samples-per-class",
                     "2", "--embedding-dim", "8", "--width", "4", "--runs-dir", str(runs),
                     "--run-name", "mine", "--no-export"]) == 0
    out = capsys.readouterr().out
    assert "after training" in out and "figures: drawing a grid of top-5 retrievals" in out
    run = runs / "mine"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["plots"] == ["recall_curves", "retrievals", "tsne"]
    assert os.path.getsize(run / "retrievals.png") > 0
    assert summary["report"] == str(run / "report.html")  # the run's report, with thumbnails
    assert "data:image/jpeg;base64," in (run / "report.html").read_text()
    if BACKEND != "tensorflow":  # the export: one line naming the command that does it
        assert cli.main(["export", str(run)]) == 2
        assert capsys.readouterr().err.strip().endswith(
            f"Keras runs on {BACKEND} here: run KERAS_BACKEND=tensorflow keras-dml export {run}")
    assert cli.main(["index", str(run), "--images", photos, "--output",
                     str(tmp_path / "index")]) == 0
    query = os.path.join(photos, sorted(os.listdir(photos))[2])
    query = os.path.join(query, sorted(os.listdir(query))[0])
    capsys.readouterr()
    assert cli.main(["search", str(tmp_path / "index"), query, "--k", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    hit = os.path.relpath(query, photos)
    assert lines[1].split()[:2] == ["1.", hit], lines  # the query itself, score 1
    assert lines[1].endswith("score 1.0000")
