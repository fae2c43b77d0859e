"""A loss with state on the running Keras backend: DynamicSoftMargin's running histogram
advances in `DMLModel.fit`'s compiled step (XLA on TensorFlow, `jax.jit` on JAX, eager
PyTorch) batch after batch as the NumPy loop's, and is saved in the `.keras` file.
Backend-neutral (NumPy inputs, `keras.ops`); CI runs it under each backend."""

import os

import keras
import numpy as np
import pytest

import reference_pml_twins as twins_ref
from keras_dml.losses import DynamicSoftMargin
from keras_dml.models import DMLModel

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    return DMLModel(inputs, keras.layers.Dense(8)(inputs))


def test_fit_advances_the_histogram_batch_after_batch_and_saves_it(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(36, 6)).astype("float32")
    labels = np.tile(np.repeat(np.arange(4), 3), 3).astype("int32")
    model = _model()
    # learning rate 0: the embeddings stay those of `predict`, so the loop sees them
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=DynamicSoftMargin(momentum=0.3))
    model.fit(x, labels, batch_size=12, epochs=1, shuffle=False, verbose=0)
    embeddings = model.predict(x, verbose=0)
    histogram = None
    for start in range(0, 36, 12):
        _, histogram = twins_ref.dynamic_soft_margin_loop(
            embeddings[start:start + 12], labels[start:start + 12], histogram, momentum=0.3)
    stored = twins_ref.keras_numpy(model.dml_loss.histogram)
    np.testing.assert_allclose(stored, histogram, rtol=1e-5, atol=1e-7)
    path = os.path.join(str(tmp_path), "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_array_equal(twins_ref.keras_numpy(loaded.dml_loss.histogram), stored)
