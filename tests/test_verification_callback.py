"""Tests for keras_dml.verification_callback: the epoch logs hold the verification metrics."""

import keras
import numpy as np

from keras_dml.evaluation import pair_scores, verification_metrics
from keras_dml.verification_callback import VerificationMetrics


def test_logs_equal_verification_metrics_of_the_embedded_pairs(tmp_path):
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
