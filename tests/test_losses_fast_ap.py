"""FastAP (keras_dml/losses/fast_ap.py): the paper's histogram AP as a NumPy loop, exact
weights, a perfect ranking, and pytorch-metric-learning 2.9's FastAPLoss. Modes,
precision, serialization and degenerate batches: tests/test_losses_contract.py."""

import numpy as np
import pytest

import loss_checks as checks
import pml_twin_checks as twin
import reference_pml_twins as twins_ref
from keras_dml import mining
from keras_dml.losses import FastAP


@pytest.mark.parametrize("num_bins", [10, pytest.param(3, marks=pytest.mark.slow),
                                      pytest.param(40, marks=pytest.mark.slow)])
def test_value_is_the_papers_histogram_ap_and_weights_are_exact(num_bins):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    loss = FastAP(num_bins)
    np.testing.assert_allclose(float(loss(labels, x)),
                               twins_ref.fast_ap_loop(x, labels, num_bins), rtol=1e-5, atol=1e-7)
    checks.assert_exact_weights(loss, labels, x)


def test_uneven_classes_and_singletons_follow_the_loop():
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4], "int32")  # 3 and 4: no positive
    x = np.random.default_rng(5).normal(size=(len(labels), 6)).astype("float32")
    np.testing.assert_allclose(float(FastAP()(labels, x)), twins_ref.fast_ap_loop(x, labels),
                               rtol=1e-5, atol=1e-7)


def test_positives_binned_before_every_negative_give_zero():
    """Two tight orthogonal clusters: the positives fill bin 0 (d = 0), the negatives
    bin 5 (d = 2), so each anchor's histogram AP is 1 and nothing moves."""
    base = np.eye(6, dtype="float32")[[0, 0, 0, 1, 1, 1]] * 5.0
    x = base + 1e-3 * np.random.default_rng(0).normal(size=base.shape).astype("float32")
    value, gradient = checks.value_and_gradient(FastAP(), np.repeat([0, 1], 3), x)
    assert value == pytest.approx(0.0, abs=1e-6)
    np.testing.assert_allclose(gradient, 0.0, atol=1e-5)


def test_a_miner_chooses_the_histograms_members():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=3)
    mined = FastAP(miner=mining.HardMiner())
    assert float(mined(labels, x)) != pytest.approx(float(FastAP()(labels, x)))
    checks.assert_exact_weights(mined, labels, x)


@pytest.mark.parametrize("make, match", [
    (lambda: FastAP(0), "num_bins"), (lambda: FastAP(2.5), "num_bins"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@twin.against_pml
@pytest.mark.parametrize("num_bins", [10, 25])
def test_equals_pytorch_metric_learning(classes, k, normalised, num_bins):
    """PML's default distance, LpDistance(power=2) of normalised embeddings, is 2 - 2 s
    (the only one its FastAPLoss accepts)."""
    from pytorch_metric_learning import losses as pml

    labels, x = twin.compared_batch(classes, k, normalised)
    twin.assert_equals_pml(FastAP(num_bins), pml.FastAPLoss(num_bins), labels, x)
