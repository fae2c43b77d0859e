"""Faults: bad labels get a ValueError naming them, at the first batch, in every mode."""

import numpy as np
import pytest
import tensorflow as tf

import keras
from keras_dml import data, losses
from keras_dml.models import DMLModel

pytestmark = pytest.mark.faults

MODES = {"eager": dict(run_eagerly=True), "graph": {}, "jit": dict(jit_compile=True)}


def _model(loss, mode="graph"):
    inputs = keras.Input((4,))
    model = DMLModel(inputs, keras.layers.Dense(3)(inputs))
    model.compile("adam", loss, **MODES[mode])
    return model


def _x(n=8):
    return np.random.default_rng(0).normal(size=(n, 4)).astype("float32")


@pytest.mark.parametrize("mode", list(MODES))
def test_fractional_float_labels_are_named_not_truncated(mode):
    y = np.array([0, 0, 1, 1, 2, 2, 3.5, 3.5], "float32")
    with pytest.raises(ValueError, match=r"non-integer values such as \[3.5\]"):
        _model(losses.MultiSimilarity(), mode).fit(_x(), y, batch_size=8, epochs=1, verbose=0)
    ds = tf.data.Dataset.from_tensors((_x(), y))
    with pytest.raises(ValueError, match=r"non-integer values such as \[3.5\]"):
        _model(losses.MultiSimilarity(), mode).fit(ds, epochs=1, verbose=0)


def test_string_labels_are_a_clear_error_with_the_mapping():
    y = np.array(["cat", "cat", "dog", "dog"] * 2)
    with pytest.raises(ValueError, match=r"got strings such as \['cat', 'cat', 'dog'\].*"
                                         r"np.unique\(names, return_inverse=True\)"):
        _model(losses.MultiSimilarity()).fit(_x(), y, batch_size=8, epochs=1, verbose=0)
    ds = tf.data.Dataset.from_tensors((_x(), y))
    with pytest.raises(ValueError, match="got strings"):
        _model(losses.MultiSimilarity()).fit(ds, epochs=1, verbose=0)


@pytest.mark.parametrize("mode", list(MODES))
def test_labels_outside_a_proxy_loss_range_are_named(mode):
    y = np.array([0, 0, 1, 1, 2, 2, 7, 7])
    ds = tf.data.Dataset.from_tensors((_x(), y)).repeat()
    with pytest.raises(ValueError, match=r"\[0, num_classes\) = \[0, 4\).*such as \[7\]"):
        _model(losses.ProxyAnchor(num_classes=4), mode).fit(ds, epochs=1, steps_per_epoch=2,
                                                            verbose=0)


@pytest.mark.parametrize("ids", [[2**24, 2**24 + 1], [5, 5 + 2**32]], ids=["2**24", "int64"])
def test_large_and_int64_ids_are_refused_in_fit_and_exact_in_the_pipeline(ids):
    y = np.repeat(np.array(ids, np.int64), 4)
    with pytest.raises(ValueError, match="below 2\\*\\*24"):
        _model(losses.MultiSimilarity()).fit(_x(), y, batch_size=8, epochs=1, verbose=0)
    loss = losses.MultiSimilarity()
    embeddings = tf.constant(_x()[:, :3])
    with pytest.raises(ValueError, match="below 2\\*\\*24"):
        loss(y, embeddings)
    # The pipeline keeps them apart: they become dense ids 0 and 1.
    xb, yb = next(iter(data.class_balanced_batches((_x(), y), 2, 4, seed=0)))
    assert sorted(np.unique(yb.numpy())) == [0, 1]
    dense = np.repeat([0, 1], 4)
    expected = float(loss(dense, embeddings))
    assert expected > 0.5
    assert float(loss(np.unique(y, return_inverse=True)[1], embeddings)) == expected
