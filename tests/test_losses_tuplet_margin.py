"""TupletMargin (keras_dml/losses/tuplet_margin.py): the paper's loop, pytorch-metric-
learning 2.9's `TupletMarginLoss`, coinciding points and the hyperparameters. The
contract (modes, W against autodiff, config, precision, degenerate batches):
tests/test_losses_contract.py."""

import numpy as np
import pytest

import loop_checks
import loss_checks as checks
import pml_peer
import reference_ranked_tuplet_angular_snr as loops
from keras_dml.losses import TupletMargin

CASES = {
    "defaults": (lambda: TupletMargin(), lambda x, y: loops.tuplet_margin(x, y)),
    "m10-s32": (lambda: TupletMargin(10.0, 32.0),
                lambda x, y: loops.tuplet_margin(x, y, 10.0, 32.0)),
}


test_value_matches_the_papers_loop_with_exact_weights = loop_checks.loop_test(CASES, seed=2)


def test_coinciding_positives_give_a_finite_gradient():
    """s_ap = 1 (theta = 0): arccos' slope is infinite there; the loss holds 1 - s^2."""
    labels = np.array([0, 0, 1, 1], "int32")
    x = np.array([[1, 0, 0], [1, 0, 0], [0, 1, 0], [0.5, 0.5, 0.7]], "float32")
    value, gradient = checks.value_and_gradient(TupletMargin(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))
    assert value == pytest.approx(loops.tuplet_margin(x, labels), rel=1e-5)


test_bad_hyperparameters = loop_checks.refusal_test([
    (lambda: TupletMargin(scale=0), "scale"), (lambda: TupletMargin(margin=float("nan")), "margin"),
])


@pml_peer.peer_test  # slow: PyTorch and PML, over batch sizes and raw / unit inputs
@pytest.mark.parametrize("margin, scale", [(5.73, 64.0), (10.0, 32.0)])
def test_equals_pytorch_metric_learning(form, classes, k, margin, scale):
    from pytorch_metric_learning import losses as pml

    labels, x = pml_peer.inputs(classes, k, seed=classes + k, form=form)
    pml_peer.assert_equals_pml(TupletMargin(margin, scale), pml.TupletMarginLoss(margin, scale),
                               labels, x)
