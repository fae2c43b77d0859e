"""`keras_dml.backend.augmentation.training_call` on the running Keras backend (jitted on
JAX): NumPy batches, no TensorFlow in the test."""

import keras
import numpy as np
import pytest

from keras_dml.backend.augmentation import training_call

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def _jitter(seed):
    return keras.Sequential([
        keras.layers.RandomRotation(0.1, fill_mode="constant", seed=seed),
        keras.layers.RandomTranslation(0.25, 0.25, fill_mode="constant", seed=seed)])


def _batch():
    x = np.zeros((6, 12, 12, 1), np.float32)
    x[:, 3:9, 5:7] = 1.0  # a bar: every shift and turn moves pixels
    return x


def test_each_call_draws_anew_reproducibly_as_the_layer_itself():
    x = _batch()
    augment = training_call(_jitter(seed=3))
    first, second = augment(x), augment(x)
    assert isinstance(first, np.ndarray) and first.shape == x.shape
    assert first.dtype == np.float32
    assert not np.allclose(first, second)  # the seed state advances between batches
    assert not np.allclose(first, x)
    again = training_call(_jitter(seed=3))
    np.testing.assert_allclose(again(x), first, atol=1e-6)  # reproducible from the seed
    np.testing.assert_allclose(again(x), second, atol=1e-6)
    eager = _jitter(seed=3)  # the layer called as it is draws the same
    np.testing.assert_allclose(keras.ops.convert_to_numpy(eager(x, training=True)), first,
                               atol=1e-5)
