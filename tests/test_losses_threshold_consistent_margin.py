"""ThresholdConsistentMargin (keras_dml/losses/threshold_consistent_margin.py): the
paper's TCM term as a NumPy loop over ordered pairs, exact weights, and
pytorch-metric-learning 2.9's ThresholdConsistentMarginLoss. Modes, precision,
serialization and degenerate batches: tests/test_losses_contract.py."""

import numpy as np
import pytest

import loss_checks as checks
import pml_twin_checks as twin
import reference as ref
import reference_pml_twins as twins_ref
from keras_dml import mining
from keras_dml.losses import ThresholdConsistentMargin


@pytest.mark.parametrize("settings", [{}, {"lambda_plus": 0.5, "lambda_minus": 2.0,
                                           "margin_plus": 0.3, "margin_minus": -0.2}])
def test_value_is_the_papers_term_and_weights_are_exact(settings):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    loss = ThresholdConsistentMargin(**settings)
    np.testing.assert_allclose(float(loss(labels, x)), twins_ref.tcm_loop(x, labels, **settings),
                               rtol=1e-5, atol=1e-7)
    weights = checks.assert_exact_weights(loss, labels, x)
    # the weights: -lambda+ / count+ on positives below m+, lambda- / count- on negatives
    s, same = ref.cosine(x), labels[:, None] == labels[None, :]
    np.fill_diagonal(same, False)
    margin_plus = settings.get("margin_plus", 0.9)
    pulled = same & (s <= margin_plus)
    assert pulled.any()
    np.testing.assert_allclose(weights[pulled], -settings.get("lambda_plus", 1.0)
                               / pulled.sum(), rtol=1e-5)


def test_no_pair_past_its_margin_gives_zero():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    value, gradient = checks.value_and_gradient(
        ThresholdConsistentMargin(margin_plus=-2.0, margin_minus=2.0), labels, x)
    assert value == 0.0 and not np.any(gradient)


def test_a_miner_keeps_the_pairs_it_averages():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=3)
    loss = ThresholdConsistentMargin(margin_plus=1.0, margin_minus=-1.0,
                                     miner=mining.HardMiner())
    terms = loss.terms(labels, x)
    positive, negative = np.asarray(terms.positive), np.asarray(terms.negative)
    s = ref.cosine(x)
    expected = (1.0 - s)[positive].mean() + (s + 1.0)[negative].mean()
    np.testing.assert_allclose(float(loss(labels, x)), expected, rtol=1e-5)


@pytest.mark.parametrize("make, match", [
    (lambda: ThresholdConsistentMargin(lambda_plus=-1), "lambda_plus"),
    (lambda: ThresholdConsistentMargin(margin_minus=float("nan")), "margin_minus"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@twin.against_pml
@pytest.mark.parametrize("settings", [{}, {"lambda_plus": 0.5, "margin_plus": 0.4,
                                           "margin_minus": 0.1}])
def test_equals_pytorch_metric_learning(classes, k, normalised, settings):
    from pytorch_metric_learning import losses as pml

    labels, x = twin.compared_batch(classes, k, normalised)
    twin.assert_equals_pml(ThresholdConsistentMargin(**settings),
                           pml.ThresholdConsistentMarginLoss(**settings), labels, x)
