"""Tests for keras_dml.callbacks (RecallAtK, VerificationMetrics) with a tiny keras.Model."""

import csv

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.callbacks import RecallAtK, VerificationMetrics
from keras_dml.evaluation import pair_scores, retrieval_metrics, verification_metrics

NUM_CLASSES = 6


def blobs(n, seed, classes=NUM_CLASSES):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(123).normal(size=(classes, 10)).astype("float32")
    labels = rng.integers(0, classes, n)
    return centres[labels] + 1.5 * rng.normal(size=(n, 10)).astype("float32"), labels


def tiny_model():
    """Embeddings = logits of a linear classifier: retrieval improves as it trains."""
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(NUM_CLASSES)])
    model.compile(
        optimizer=keras.optimizers.SGD(0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    return model


def test_logs_drive_model_checkpoint_and_csv_logger(tmp_path):
    x, y = blobs(240, 0)
    x_val, y_val = blobs(90, 1)
    model = tiny_model()
    checkpoint = keras.callbacks.ModelCheckpoint(
        str(tmp_path / "best.keras"), monitor="val_recall@1", mode="max", save_best_only=True
    )
    recall = RecallAtK((x_val, y_val), ks=(1, 2, 4), verbose=0)
    history = model.fit(
        x, y, epochs=4, batch_size=32, verbose=0,
        callbacks=[recall, checkpoint, keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))],
    )
    keys = ["val_recall@1", "val_recall@2", "val_recall@4", "val_precision@1",
            "val_r_precision", "val_map@r"]
    for key in keys:
        assert len(history.history[key]) == 4
    # The last epoch's logs are the metrics of the trained model.
    expected = retrieval_metrics(model.predict(x_val, verbose=0), y_val, ks=(1, 2, 4))
    for key in keys:
        assert history.history[key][-1] == pytest.approx(expected[key[4:]])
    # ModelCheckpoint monitored the callback's value and saved the best epoch's model.
    assert checkpoint.best == pytest.approx(max(history.history["val_recall@1"]))
    best = keras.saving.load_model(str(tmp_path / "best.keras"))
    assert retrieval_metrics(best.predict(x_val, verbose=0), y_val, ks=(1,))[
        "recall@1"
    ] == pytest.approx(checkpoint.best)
    with open(tmp_path / "log.csv") as handle:
        rows = list(csv.DictReader(handle))
    recalls = [float(r["val_recall@1"]) for r in rows]
    assert recalls == pytest.approx(history.history["val_recall@1"])


def test_early_stopping_reads_the_metric():
    x, y = blobs(120, 2)
    stop = keras.callbacks.EarlyStopping(monitor="val_map@r", mode="max", patience=0)
    model = tiny_model()
    model.fit(x, y, epochs=3, verbose=0, callbacks=[RecallAtK((x, y), verbose=0), stop])
    assert stop.best is not None and np.isfinite(stop.best)


def test_every_n_epochs_and_dataset_input(capsys):
    x, y = blobs(120, 3)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(25)
    recall = RecallAtK(dataset, ks=(1,), metrics=("recall@k",), every_n_epochs=2)
    history = tiny_model().fit(x, y, epochs=5, verbose=0, callbacks=[recall])
    assert len(history.history["val_recall@1"]) == 2  # epochs 2 and 4 only
    assert set(recall.last_results) == {"val_recall@1"}
    assert recall.history["epoch"] == [1, 3]
    assert recall.history["val_recall@1"] == history.history["val_recall@1"]
    printed = capsys.readouterr().out
    assert printed.count("val_recall@1:") == 2 and "Epoch 4:" in printed


def test_seen_unseen_split_and_references():
    x, y = blobs(150, 4)
    model = tiny_model()
    model.fit(x, y, epochs=1, verbose=0)
    recall = RecallAtK((x, y), ks=(1, 2), seen_classes=[0, 1, 2], prefix="test_", verbose=0)
    recall.set_model(model)
    logs = recall.evaluate()
    emb = model.predict(x, verbose=0)
    seen = np.isin(y, [0, 1, 2])
    for group, mask in (("seen_", seen), ("unseen_", ~seen)):
        expected = retrieval_metrics(emb[mask], y[mask], ks=(1, 2))
        assert logs[f"test_{group}recall@2"] == pytest.approx(expected["recall@2"])
        assert logs[f"test_{group}map@r"] == pytest.approx(expected["map@r"])
    assert logs["test_recall@1"] == pytest.approx(retrieval_metrics(emb, y, ks=(1,))["recall@1"])

    gallery = RecallAtK((x[:40], y[:40]), gallery_data=(x[40:], y[40:]), ks=(1,), verbose=0)
    gallery.set_model(model)
    expected = retrieval_metrics(emb[:40], y[:40], emb[40:], y[40:], ks=(1,))
    assert gallery.evaluate()["val_recall@1"] == pytest.approx(expected["recall@1"])
    with pytest.deprecated_call(match="reference_data= is deprecated"):
        old = RecallAtK((x[:40], y[:40]), reference_data=(x[40:], y[40:]), ks=(1,), verbose=0)
    old.set_model(model)
    assert old.evaluate()["val_recall@1"] == pytest.approx(expected["recall@1"])


def test_embedding_model_and_errors():
    x, y = blobs(60, 5)
    model = tiny_model()
    head = keras.Sequential([keras.Input((10,)), keras.layers.Dense(3)])
    recall = RecallAtK((x, y), ks=(1,), model=head, verbose=0)
    recall.set_model(model)
    expected = retrieval_metrics(head.predict(x, verbose=0), y, ks=(1,))["recall@1"]
    assert recall.evaluate()["val_recall@1"] == pytest.approx(expected)
    with pytest.deprecated_call(match="embedding_model= is deprecated and removed in 0.3"):
        old = RecallAtK(validation_data=(x, y), ks=(1,), embedding_model=head, verbose=0)
    old.set_model(model)
    assert old.evaluate()["val_recall@1"] == pytest.approx(expected)
    with pytest.deprecated_call(match="validation_data= is deprecated and removed in 0.3"):
        VerificationMetrics(validation_data=(x, y), model=head)
    with pytest.raises(ValueError, match="model must be a model"):
        RecallAtK((x, y), model="head")
    with pytest.raises(ValueError, match="every_n_epochs"):
        RecallAtK((x, y), every_n_epochs=0)
    with pytest.raises(ValueError, match="tf.data.Dataset"):
        RecallAtK(x)
    with pytest.raises(ValueError, match="no model"):
        RecallAtK((x, y)).evaluate()


def test_bad_ks_or_metrics_fail_at_construction_not_after_an_epoch():
    x = np.zeros((8, 3), "float32")
    y = np.repeat(np.arange(4), 2)
    with pytest.raises(ValueError, match="every k in ks"):
        RecallAtK((x, y), ks=(0,))
    with pytest.raises(ValueError, match="metrics must be"):
        RecallAtK((x, y), metrics=("accuracy",))


@pytest.mark.parametrize("arguments, message", [
    ({"metric": "cosin"}, "metric must be one of .* got 'cosin'"),
    ({"far_targets": (1e-3, 101)}, r"far_targets .* in \(0, 1\], got \(0.001, 101\)"),
    ({"far_targets": ()}, "far_targets must be a non-empty list"),
    ({"far_targets": (0.0,)}, "far_targets"),
    ({"far_targets": "often"}, "got 'often'"),
    ({"max_pairs": 0}, "max_pairs must be a positive integer, got 0"),
    ({"batch_size": 2.5}, "batch_size must be a positive integer, got 2.5"),
    ({"every_n_epochs": 0}, "every_n_epochs"),
    ({"prefix": None}, "prefix must be a string, got None"),
    ({"steps": 0}, "steps must be a positive integer, got 0"),
    ({"model": "model"}, "model must be a model"),
])
def test_verification_metrics_refuses_a_bad_argument_at_construction(arguments, message):
    x = np.zeros((8, 3), "float32")
    y = np.repeat(np.arange(4), 2)
    with pytest.raises(ValueError, match=message):
        VerificationMetrics((x, y), **arguments)


@pytest.mark.parametrize("arguments, message", [
    ({"metric": "cosin"}, "got 'cosin'"),
    ({"batch_size": 0}, "batch_size must be a positive integer, got 0"),
    ({"chunk_size": -1}, "chunk_size must be a positive integer, got -1"),
    ({"verbose": 3}, "verbose must be one of"),
    ({"prefix": 1}, "prefix must be a string, got 1"),
])
def test_recall_at_k_refuses_a_bad_argument_at_construction(arguments, message):
    x = np.zeros((8, 3), "float32")
    y = np.repeat(np.arange(4), 2)
    with pytest.raises(ValueError, match=message):
        RecallAtK((x, y), **arguments)


def test_verification_metrics_keeps_valid_arguments():
    x = np.zeros((8, 3), "float32")
    y = np.repeat(np.arange(4), 2)
    callback = VerificationMetrics((x, y), far_targets=[1, 0.5], metric="dot", max_pairs=10)
    assert callback.far_targets == (1.0, 0.5)
    assert callback.metric == "dot" and callback.max_pairs == 10 and callback.batch_size == 256


def test_verification_logs_equal_verification_metrics_of_the_embedded_pairs(tmp_path):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    y = rng.integers(0, 5, 60)
    x = (rng.normal(size=(5, 6))[y] + rng.normal(scale=0.5, size=(60, 6))).astype("float32")
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4)])
    model.compile(optimizer="sgd", loss="mse")
    callback = VerificationMetrics((x, y))
    csv = tmp_path / "log.csv"
    history = model.fit(x, rng.normal(size=(60, 4)), epochs=2, verbose=0,
                        callbacks=[callback, keras.callbacks.CSVLogger(str(csv))])
    expected = verification_metrics(*pair_scores(model.predict(x, verbose=0), y))
    for key in ("roc_auc", "eer", "tar@far=1e-3", "best_f1_threshold"):
        assert abs(history.history[f"val_{key}"][-1] - expected[key]) < 1e-6
    assert "val_tar@far=1e-4" in csv.read_text().splitlines()[0]


def _training_stream():
    from keras_dml.data import class_balanced_batches

    x, y = blobs(60, 0)
    return class_balanced_batches((x, y), 3, 2, seed=0)


@pytest.mark.parametrize("callback", [RecallAtK, VerificationMetrics])
def test_a_training_stream_as_validation_data_is_refused_at_once(callback):
    with pytest.raises(ValueError, match=r"data is an infinite tf.data.Dataset.*"
                                         r"keras_dml.data.evaluation_batches\("):
        callback(_training_stream())
    with pytest.raises(ValueError, match="gallery_data is an infinite"):
        RecallAtK(blobs(30, 1), gallery_data=_training_stream())


def test_steps_bounds_a_training_stream_as_validation_data():
    model = tiny_model()
    recall = RecallAtK(_training_stream(), ks=(1,), steps=5, verbose=0)
    model.fit(*blobs(60, 2), epochs=1, verbose=0, callbacks=[recall])
    assert 0.0 <= recall.last_results["val_recall@1"] <= 1.0
