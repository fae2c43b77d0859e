"""DMLModel on the running Keras backend (TensorFlow, JAX or PyTorch): NumPy batches,
keras.ops losses, no TensorFlow in the test. Run under each KERAS_BACKEND."""

import os
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

import model_checks as checks
from keras_dml import losses
from keras_dml.models import DMLModel

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

BACKENDS = ("tensorflow", "jax", "torch")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _numpy(value):
    return keras.ops.convert_to_numpy(value)


def _run_checks(backend, *args, env=None):
    """`tests/model_checks.py args` in a new process under `backend`."""
    environment = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": ROOT,
                   **(env or {})}
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "model_checks.py"),
                             *args], env=environment, capture_output=True, text=True,
                            timeout=600, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-3000:]


def test_fit_on_numpy_batches_lowers_the_loss_and_trains_the_loss_owned_weights():
    x, y = checks.data()
    model = checks.model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=checks.OpsProxyLoss())
    proxies = model.loss_layer.proxies
    assert any(w is proxies for w in model.trainable_weights)
    assert not any(w.path == proxies.path for w in model.embedder().weights)
    before = _numpy(proxies).copy()
    history = model.fit(x, y, batch_size=16, shuffle=False, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert np.abs(_numpy(proxies) - before).max() > 1e-3


def _proxies(model):
    return model.loss_layer.trainable_weights[0]


@pytest.mark.parametrize("name", ["multi_similarity", "proxy_anchor"])
def test_keras_dml_losses_train_and_their_proxies_learn(name):
    x, y = checks.data()
    model = checks.model()
    loss = losses.MultiSimilarity() if name == "multi_similarity" else losses.ProxyAnchor(
        num_classes=checks.CLASSES)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    before = _numpy(_proxies(model)).copy() if name == "proxy_anchor" else None
    history = model.fit(x, y, batch_size=16, shuffle=False, epochs=3, verbose=0)
    assert history.history["loss"][-1] < 0.7 * history.history["loss"][0], history.history
    if before is not None:
        assert np.abs(_numpy(_proxies(model)) - before).max() > 1e-2


@pytest.mark.parametrize("endless", [False, True])
def test_pair_loss_trains_on_a_py_dataset(endless):
    """A finite PyDataset, or an endless one (`num_batches` None, as the C x k sampler's
    `ClassBalancedPyDataset`) bounded by `steps_per_epoch`."""
    x, y = checks.data()

    class Batches(keras.utils.PyDataset):
        @property
        def num_batches(self):
            return None if endless else 4

        def __getitem__(self, index):
            index %= 4
            return x[16 * index:16 * index + 16], y[16 * index:16 * index + 16]

    model = checks.model()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=checks.OpsContrastive())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "shuffle=True ... will be ignored" warning
        history = model.fit(Batches(), epochs=3, verbose=0,
                            steps_per_epoch=4 if endless else None)
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_the_loss_sees_the_whole_batch_and_evaluate_reports_it():
    x, y = checks.data(16)
    model = checks.model()
    model.compile(optimizer="sgd", loss=checks.OpsContrastive())
    expected = float(_numpy(checks.OpsContrastive()(y, model(x))))
    assert model.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("loss", ["ops", "proxy_anchor"])
def test_save_and_load_restore_the_loss_owned_weights_and_training_resumes(loss, tmp_path):
    x, y = checks.data()
    model = checks.trained_proxy_model(loss=loss)
    path = str(tmp_path / "model.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(_numpy(_proxies(restored)), _numpy(_proxies(model)))
    np.testing.assert_allclose(restored.predict(x, verbose=0), model.predict(x, verbose=0),
                               atol=1e-6)
    assert restored.evaluate(x, y, batch_size=16, verbose=0) == pytest.approx(
        model.evaluate(x, y, batch_size=16, verbose=0), rel=1e-5)
    trained = _numpy(_proxies(restored)).copy()
    restored.fit(x, y, batch_size=16, shuffle=False, epochs=1, verbose=0)
    assert np.abs(_numpy(_proxies(restored)) - trained).max() > 1e-4


@pytest.mark.parametrize("jit_compile", [False, "auto"])
def test_a_nan_batch_stops_training_before_any_update(jit_compile):
    x, y = checks.data()
    x[3, 0] = np.nan
    model = checks.model()
    model.compile(optimizer="adam", loss=checks.OpsProxyLoss(), jit_compile=jit_compile)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(FloatingPointError, match="NaN or Inf"):
        model.fit(x, y, batch_size=64, epochs=1, verbose=0)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("other", BACKENDS)
def test_a_model_saved_under_another_backend_loads_and_trains_here(other, tmp_path):
    if other == keras.backend.backend():
        pytest.skip("saved and loaded under the same backend: "
                    "test_save_and_load_restore_the_loss_owned_weights_and_training_resumes")
    path, embeddings = str(tmp_path / "model.keras"), str(tmp_path / "embeddings.npy")
    _run_checks(other, "save", path, embeddings)
    restored = keras.models.load_model(path)
    assert isinstance(restored, DMLModel)
    x, y = checks.data()
    np.testing.assert_allclose(restored.predict(x, verbose=0), np.load(embeddings), atol=1e-5)
    assert isinstance(restored.dml_loss, losses.ProxyAnchor)
    proxies = _numpy(_proxies(restored)).copy()
    restored.fit(x, y, batch_size=16, shuffle=False, epochs=1, verbose=0)
    assert np.abs(_numpy(_proxies(restored)) - proxies).max() > 1e-4


def test_jax_data_parallel_loss_sees_the_global_batch(tmp_path):
    """Under keras.distribution.DataParallel over two CPU devices (a JAX process of its
    own: the device count is fixed when JAX starts), the loss of a 32-sample batch and
    one update equal single-device ones; the halves' mean loss differs."""
    results = str(tmp_path / "results.npz")
    _run_checks("jax", "data_parallel", results,
                env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    r = np.load(results)
    for name in ("contrastive", "proxy"):
        assert int(r[f"{name}_parallel_devices"]) == 2
        single, parallel = float(r[f"{name}_single_loss"]), float(r[f"{name}_parallel_loss"])
        assert parallel == pytest.approx(single, rel=1e-5)
        weights = sorted(k[len(f"{name}_single_"):] for k in r if
                         k.startswith(f"{name}_single_weight"))
        assert weights
        for w in weights:
            np.testing.assert_allclose(r[f"{name}_parallel_{w}"], r[f"{name}_single_{w}"],
                                       atol=1e-5)
    contrastive = float(r["contrastive_single_loss"])
    assert float(r["contrastive_single_halves_loss"]) != pytest.approx(contrastive, rel=1e-3)
