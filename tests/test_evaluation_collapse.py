"""Tests for keras_dml.evaluation.collapse: collapsed embeddings told apart from trained ones."""

import warnings

import keras
import numpy as np
import pytest

from keras_dml.backbones import cnn3
from keras_dml.callbacks import RecallAtK
from keras_dml.evaluation import collapse_warning, embedding_spread
from keras_dml.evaluation.collapse import COLLAPSED_BELOW


def test_spread_of_identical_centred_and_unit_embeddings():
    rng = np.random.default_rng(0)
    assert embedding_spread(np.ones((50, 8)))["relative_spread"] == 0.0
    assert embedding_spread(np.ones((50, 8)))["mean_cosine"] == pytest.approx(1.0)
    centred = rng.normal(size=(2000, 16))
    assert embedding_spread(centred)["relative_spread"] == pytest.approx(1.0, abs=0.02)
    assert abs(embedding_spread(centred)["mean_cosine"]) < 0.01
    unit = rng.normal(size=(400, 16)) + 3.0
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    spread = embedding_spread(unit)
    pairs = unit @ unit.T
    assert spread["mean_cosine"] == pytest.approx(pairs[~np.eye(400, dtype=bool)].mean())
    assert spread["relative_spread"] == pytest.approx(
        np.sqrt(1 - np.sum(unit.mean(0) ** 2)), rel=1e-9)
    assert embedding_spread(np.zeros((5, 3)))["relative_spread"] == 0.0


def test_the_warning_names_the_causes_only_for_collapsed_embeddings():
    rng = np.random.default_rng(1)
    nearly_one_point = 1.0 + 1e-4 * rng.normal(size=(300, 32))
    message = collapse_warning(nearly_one_point)
    assert "collapsed" in message and "mean pairwise cosine 1.000000" in message
    for cause in ("BatchNorm statistics", "momentum", "learning rate", "normalised twice"):
        assert cause in message
    assert collapse_warning(rng.normal(size=(300, 32))) is None
    # Trained embeddings of one domain are far from orthogonal, and not collapsed.
    similar = 1.0 + 0.3 * rng.normal(size=(300, 32))
    assert embedding_spread(similar)["mean_cosine"] > 0.9 and collapse_warning(similar) is None


def test_mobilenet_v3_fed_inputs_normalised_twice_is_collapsed_and_fed_pixels_is_not():
    """The issue's case: MobileNetV3 rescales [0, 255] inside; fed [0, 1] it sees
    [-1, -0.992] and, untrained in inference mode, maps everything to one point."""
    pixels = np.random.default_rng(2).uniform(0, 255, (64, 32, 32, 3)).astype("float32")
    mobilenet = keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None,
                                                    include_top=False, pooling="avg")
    twice = embedding_spread(mobilenet(pixels / 255.0, training=False).numpy())
    assert twice["relative_spread"] < COLLAPSED_BELOW and twice["mean_cosine"] > 0.9999
    assert collapse_warning(mobilenet(pixels, training=False).numpy()) is None
    small = keras.Sequential([cnn3((32, 32, 3)), keras.layers.Dense(16)])
    assert collapse_warning(small(pixels / 255.0, training=False).numpy()) is None


def test_recall_at_k_warns_once_per_callback_not_every_epoch():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(60, 10)).astype("float32"), np.repeat(np.arange(6), 10)
    constant = keras.Sequential([keras.Input((10,)), keras.layers.Dense(
        4, kernel_initializer="zeros", bias_initializer="ones", trainable=False)])
    constant.compile("sgd", "mse")
    recall = RecallAtK((x, y), ks=(1,), verbose=0)
    with pytest.warns(UserWarning, match="collapsed") as caught:
        constant.fit(x, np.zeros((60, 4)), epochs=3, verbose=0, callbacks=[recall])
    assert sum("collapsed" in str(w.message) for w in caught) == 1
    healthy = keras.Sequential([keras.Input((10,)), keras.layers.Dense(4)])
    healthy.compile("sgd", "mse")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        healthy.fit(x, np.zeros((60, 4)), epochs=1, verbose=0,
                    callbacks=[RecallAtK((x, y), ks=(1,), verbose=0)])
