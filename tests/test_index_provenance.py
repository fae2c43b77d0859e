"""Tests for keras_dml.index.provenance: the model fingerprint, and every index (saved
directory or Milvus collection) bound to the model and preprocessing that made it."""

import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.data import Preprocessing
from keras_dml.index import Index, ModelMismatchError, model_fingerprint
from keras_dml.models import DMLModel


def _embedder(seed, size=16):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((size, size, 3)), keras.layers.Conv2D(4, 3),
                             keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])


def _photos(root):
    """2 classes x 2 PNG files."""
    rng = np.random.default_rng(0)
    paths, labels = [], []
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(2):
            path = root / label / f"{i}.png"
            image = rng.integers(0, 256, (20, 24, 3)).astype(np.uint8)
            path.write_bytes(tf.io.encode_png(image).numpy())
            paths.append(str(path))
            labels.append(label)
    return paths, labels


def test_fingerprint_follows_the_weights_not_the_names():
    a = _embedder(0)
    copy = keras.models.clone_model(a)
    copy.set_weights(a.get_weights())
    assert model_fingerprint(copy) == model_fingerprint(a)
    assert model_fingerprint(_embedder(1)) != model_fingerprint(a)  # retrained: other weights
    nudged = keras.models.clone_model(a)
    nudged.set_weights([w + 1e-7 * (i == 0) for i, w in enumerate(a.get_weights())])
    assert model_fingerprint(nudged) != model_fingerprint(a)
    inputs = keras.Input((4,))
    model = DMLModel(inputs, keras.layers.Dense(2)(inputs))
    assert model_fingerprint(model) == model_fingerprint(model.embedder())
    assert model_fingerprint(a).startswith("sha256:") and len(model_fingerprint(a)) == 23


def test_from_model_records_the_model_and_preprocessing_in_the_saved_index(tmp_path):
    paths, labels = _photos(tmp_path / "photos")
    embedder = _embedder(0)
    prepare = Preprocessing(image_size=16, resize_size=18, channels=3)
    index = Index.from_model(embedder, (paths, labels), preprocessing=prepare, verbose=0,
                             run="runs/birds")
    made = index.provenance
    assert made == {"model_fingerprint": model_fingerprint(embedder),
                    "preprocessing": prepare.to_dict(), "dim": 3, "metric": "cosine",
                    "run": "runs/birds"}
    index.save(tmp_path / "index")
    with open(tmp_path / "index" / "index.json") as f:
        assert json.load(f)["provenance"] == made
    loaded = Index.load(tmp_path / "index")
    assert loaded.provenance == made
    loaded.check_model(embedder)
    loaded.check_model(model_fingerprint(embedder))
    other = _embedder(5)
    with pytest.raises(ModelMismatchError) as refused:
        loaded.check_model(other, run="runs/birds-retrained")
    message = str(refused.value)
    assert model_fingerprint(embedder) in message and model_fingerprint(other) in message
    assert "runs/birds" in message and "runs/birds-retrained" in message
    with pytest.warns(UserWarning, match="allow_mismatch=True: The index holds"):
        loaded.check_model(other, allow_mismatch=True)

    with pytest.warns(UserWarning, match="records no preprocessing"):  # as keras-dml train
        default = Index.from_model(embedder, (paths, labels), verbose=0)
    assert default.provenance["preprocessing"]["image_size"] == 16
    arrays = Index.from_model(embedder, (np.zeros((2, 16, 16, 3), "float32"), [0, 1]),
                              verbose=0)
    assert arrays.provenance["preprocessing"] is None  # arrays arrive prepared


def test_an_index_saved_before_provenance_loads_and_says_it_cannot_check(tmp_path):
    index = Index()
    index.add(np.eye(3, dtype="float32"))
    index.save(tmp_path / "old")
    config_path = tmp_path / "old" / "index.json"
    config = json.loads(config_path.read_text())
    del config["provenance"]
    config_path.write_text(json.dumps(config))
    (tmp_path / "old" / "added.npy").unlink()
    old = Index.load(tmp_path / "old")
    assert old.provenance["model_fingerprint"] is None and len(old) == 3
    with pytest.warns(UserWarning, match="records no model fingerprint"):
        old.check_model("sha256:0123456789abcdef")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Index.load(tmp_path / "old").search(np.eye(3, dtype="float32"), k=1)


def test_from_model_into_another_models_collection_embeds_nothing(tmp_path):
    pytest.importorskip("milvus_lite")
    uri = str(tmp_path / "catalogue.db")
    x = (np.random.default_rng(0).random((4, 16, 16, 3)).astype("float32"), [0, 1, 0, 1])
    first = _embedder(0)
    Index.from_model(first, x, backend="milvus", uri=uri, verbose=0, run="runs/a").close()
    with pytest.raises(ModelMismatchError, match="runs/a.*runs/b"):
        Index.from_model(_embedder(1), x, backend="milvus", uri=uri, verbose=0, run="runs/b")
    with Index.from_model(first, x, backend="milvus", uri=uri, verbose=0) as index:
        assert len(index) == 8 and index.provenance["run"] == "runs/a"
