"""The loss contract on the running Keras backend (TensorFlow, JAX or PyTorch).

Backend-neutral: NumPy inputs, `keras.ops`, each backend's own autodiff (see
backend_checks.py); CI runs this module under KERAS_BACKEND=tensorflow, jax and torch,
each in its own process. Over every registered loss (`keras_dml.losses.ENTRIES`): the
value against the NumPy loops of tests/reference*.py, a finite gradient equal under
the backend's compiled step, W against plain autodiff where W is exact,
`weighting.pair_weights`, degenerate batches and the config round trip. Then the
miners on a hand-built batch, `Combined`, `CrossBatchMemory` and the losses that
pytorch-metric-learning has under the same definition (PML runs on PyTorch and NumPy,
so its values are computed here whatever the backend).
"""

import keras
import numpy as np
import pytest

import backend_checks as checks
import reference as ref
from keras_dml import losses, mining, ops, weighting
from keras_dml.losses import ENTRIES

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

NAMES = checks.NAMES


@pytest.mark.parametrize("name", NAMES)
def test_value_matches_the_numpy_loop(name):
    labels, x = checks.batch(name, seed=2)
    loss = checks.make(name)
    expected = checks.REFERENCES[name](loss, labels, x.astype("float64"))
    np.testing.assert_allclose(float(checks.numpy(loss(labels, x))), expected, rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_gradient_is_finite_and_the_compiled_step_agrees(name):
    labels, x = checks.batch(name, seed=3)
    loss = checks.make(name)
    value, gradient = checks.value_and_gradient(loss, labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
    assert np.abs(gradient).sum() > 0
    compiled_value, compiled_gradient = checks.value_and_gradient(loss, labels, x, jit=True)
    np.testing.assert_allclose(compiled_value, value, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(compiled_gradient, gradient, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_weights_are_the_derivative_where_exact(name):
    """The engine's W equals plain autodiff of the value w.r.t. the pair matrix (for the
    losses whose W is the exact derivative; ICE states reweighted gradients)."""
    labels, x = checks.batch(name, seed=4)
    loss = checks.make(name)
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    assert np.all(np.isfinite(weights))
    if ENTRIES[name].exact_weights:
        scale = max(1.0, np.abs(autodiff).max())
        np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.parametrize("name", NAMES)
def test_pair_weights_are_finite_one_row_per_query_and_zero_off_pairs(name):
    labels, x = checks.batch(name, seed=5)
    loss = checks.make(name)
    weights = np.asarray(weighting.pair_weights(loss, labels, x))
    assert weights.shape[0] == len(x) and np.all(np.isfinite(weights))
    assert np.abs(weights).sum() > 0
    terms = loss.terms(labels, x)
    if terms.reference is None or terms.reference.rows is None:  # keys not drawn from rows
        on_pairs = checks.numpy(terms.positive) | checks.numpy(terms.negative)
        assert np.all(weights[~on_pairs] == 0)


DEGENERATE_BATCHES = {
    # name: class labels; embeddings are drawn per batch
    "no_positives": np.arange(6),
    "one_class": np.zeros(6, int),
    "k1_and_pairs": np.array([0, 1, 2, 3, 3, 4]),
    "single_sample": np.array([7]),
}


@pytest.mark.parametrize("batch", list(DEGENERATE_BATCHES))
@pytest.mark.parametrize("name", NAMES)
def test_degenerate_batches_are_finite(name, batch):
    labels = DEGENERATE_BATCHES[batch].astype("int32")
    rng = np.random.default_rng(6)
    if ENTRIES[name].labels == "continuous":  # as many samples, float label vectors
        labels = rng.normal(size=(len(labels), 2)).astype("float32")
    x = rng.normal(size=(len(labels), checks.DIM)).astype("float32")
    value, gradient = checks.value_and_gradient(checks.make(name), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip_and_lookup_by_name(name):
    loss = checks.make(name)
    config = loss.get_config()
    assert type(loss).from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == config
    assert keras.saving.get_registered_object(f"keras_dml>{name}") is type(loss)


# == miners ===========================================================================

def _angles_batch():
    """Unit vectors in the plane; anchor 0 at 0 degrees. Row 0 similarities: positives
    1 (10 deg), 2 (40 deg); negatives 3 (20 deg), 4 (60 deg), 5 (90 deg)."""
    degrees = np.array([0.0, 10.0, 40.0, 20.0, 60.0, 90.0])
    x = np.stack([np.cos(np.radians(degrees)), np.sin(np.radians(degrees))], 1)
    return np.array([0, 0, 0, 1, 1, 2], "int32"), x.astype("float32")


def _mine(miner, labels, x):
    similarity = ops.pairwise(keras.ops.convert_to_tensor(x))
    positive, negative = ops.label_masks(keras.ops.convert_to_tensor(labels))
    kept_positive, kept_negative = miner(similarity, positive, negative)
    return checks.numpy(kept_positive), checks.numpy(kept_negative)


@pytest.mark.parametrize("miner,positives,negatives", [
    (mining.SemiHardMiner(), {1, 2}, {3, 4}),
    (mining.HardMiner(), {2}, {3}),
    (mining.EasyMiner(), {1}, {3}),
    (mining.PairMarginMiner(pos_margin=0.9, neg_margin=0.3), {2}, {3, 4}),
    (mining.MultiSimilarityMiner(0.1), {1, 2}, {3}),
    (mining.MultiSimilarityMiner(0.3), {1, 2}, {3, 4}),
], ids=["semihard", "hard", "easy", "pair_margin", "vthm", "vthm_wide"])
def test_miners_keep_the_known_pairs_of_a_hand_built_batch(miner, positives, negatives):
    labels, x = _angles_batch()
    kept_positive, kept_negative = _mine(miner, labels, x)
    assert set(np.flatnonzero(kept_positive[0])) == positives
    assert set(np.flatnonzero(kept_negative[0])) == negatives


@pytest.mark.parametrize("mining_name", ["semihard", "hard", "easy"])
def test_triplet_miners_equal_the_numpy_loop(mining_name):
    labels, x = checks.batch("Triplet", seed=7)
    loss = losses.Triplet(margin=0.3, miner=mining.triplet.TRIPLET_MINERS[mining_name]())
    value, gradient = checks.value_and_gradient(loss, labels, x)
    expected = ref.triplet(x.astype("float64"), labels, 0.3, mining=mining_name)
    np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-6)
    assert np.all(np.isfinite(gradient))


def test_distance_weighted_miner_keeps_positives_and_samples_finite_negatives():
    labels, x = checks.batch("Margin", seed=8)
    keras.utils.set_random_seed(0)
    loss = losses.Margin(miner=mining.DistanceWeighted())
    value, gradient = checks.value_and_gradient(loss, labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient)) and value > 0


# == Combined and CrossBatchMemory ====================================================

def test_combined_is_the_weighted_sum_of_its_parts_value_and_gradient():
    labels, x = checks.batch("MultiSimilarity", seed=9)
    parts = [losses.MultiSimilarity(), losses.Circle(), checks.make("ProxyAnchor")]
    combined = losses.Combined(parts, weights=[1.0, 0.5, 0.25])
    value, gradient = checks.value_and_gradient(combined, labels, x)
    expected = [checks.value_and_gradient(part, labels, x) for part in parts]
    np.testing.assert_allclose(
        value, sum(w * v for w, (v, _) in zip([1.0, 0.5, 0.25], expected)), rtol=1e-5)
    np.testing.assert_allclose(
        gradient, sum(w * g for w, (_, g) in zip([1.0, 0.5, 0.25], expected)),
        rtol=1e-4, atol=1e-6)
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(combined))
    assert restored.get_config() == combined.get_config()


def _memory_batches(count=6, n=8, d=8, classes=5, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, classes, n).astype("int32"), rng.normal(size=(n, d)).astype("f"))
            for _ in range(count)]


def test_cross_batch_memory_equals_pml_before_and_after_wrap_around():
    torch = pytest.importorskip("torch", reason="PML's reference needs PyTorch")
    pml = pytest.importorskip("pytorch_metric_learning.losses",
                              reason="the reference is pytorch-metric-learning's")
    batches = _memory_batches()  # 6 batches of 8 into a memory of 20: wraps at the third
    xbm = pml.CrossBatchMemory(pml.MultiSimilarityLoss(), 8, memory_size=20)
    loss = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), memory_size=20)
    for step, (labels, x) in enumerate(batches):
        e = torch.tensor(x, requires_grad=True)
        expected = xbm(e, torch.tensor(labels, dtype=torch.long))
        expected.backward()
        value, gradient = checks.value_and_gradient(loss, labels, x)
        assert value == pytest.approx(expected.item(), rel=1e-5, abs=1e-6), step
        np.testing.assert_allclose(gradient, e.grad.numpy(), rtol=1e-4, atol=1e-6,
                                   err_msg=str(step))
    assert int(checks.numpy(loss.memory.filled)) == 20


# == pytorch-metric-learning, same definitions ========================================

@pytest.mark.parametrize("name", ["Circle", "SupervisedContrastive", "NTXent", "SmoothAP"])
def test_equals_pytorch_metric_learning(name):
    torch = pytest.importorskip("torch", reason="PML's reference needs PyTorch")
    pml = pytest.importorskip("pytorch_metric_learning.losses",
                              reason="the reference is pytorch-metric-learning's")
    # Sorted C x k labels with C == k: the batches PML's SmoothAPLoss accepts; every
    # anchor has a positive and a negative, where PML's averages are ours.
    rng = np.random.default_rng(10)
    labels = np.repeat(np.arange(4), 4).astype("int32")
    x = rng.normal(size=(16, 16)).astype("float32")
    peer = {"Circle": pml.CircleLoss(), "SupervisedContrastive": pml.SupConLoss(),
            "NTXent": pml.NTXentLoss(), "SmoothAP": pml.SmoothAPLoss()}[name]
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected = peer(xt, torch.tensor(labels, dtype=torch.long))
    expected.backward()
    value, gradient = checks.value_and_gradient(getattr(losses, name)(), labels, x)
    np.testing.assert_allclose(value, expected.item(), rtol=1e-5)
    scale = np.abs(xt.grad.numpy()).max()
    np.testing.assert_allclose(gradient / scale, xt.grad.numpy() / scale, rtol=1e-5, atol=1e-5)
