"""Angular (keras_dml/losses/angular.py): the paper's loop, pytorch-metric-learning
2.9's `AngularLoss`, the positive's row in W, the batch-only reference set and the
hyperparameters. The contract (modes, W against autodiff, config, precision,
degenerate batches): tests/test_losses_contract.py."""

import numpy as np
import pytest

import loop_checks
import pml_peer
import reference_ranked_tuplet_angular_snr as loops
from keras_dml import weighting
from keras_dml.losses import Angular, Reference

CASES = {
    "defaults": (lambda: Angular(), lambda x, y: loops.angular(x, y)),
    "alpha50": (lambda: Angular(50.0), lambda x, y: loops.angular(x, y, 50.0)),
}


test_value_matches_the_papers_loop_with_exact_weights = loop_checks.loop_test(CASES, seed=4)


def test_weights_reach_the_positives_rows():
    """f_apn has s_pn: W is non-zero at (p, n) for a positive p of an anchor with
    negative n, a pair no per-anchor term of anchor a could weight."""
    labels = np.array([0, 0, 1, 2], "int32")
    x = np.random.default_rng(0).normal(size=(4, 5)).astype("float32")
    autodiff, weights = weighting.autodiff_weights(Angular(), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-7)
    assert weights[1, 2] > 0 and weights[0, 3] > 0  # the pairs (0,1) and (1,0) push both rows


def test_an_explicit_reference_set_is_refused():
    labels, x = loop_checks.labelled("cxk", seed=1)
    with pytest.raises(ValueError, match="Angular .*batch itself"):
        Angular()(labels, x, reference=Reference(labels, x))


@pytest.mark.parametrize("alpha", [0, -5, 90, float("inf")])
def test_bad_alpha(alpha):
    with pytest.raises(ValueError, match="alpha"):
        Angular(alpha)


@pml_peer.peer_test  # slow: PyTorch and PML, over batch sizes and raw / unit inputs
@pytest.mark.parametrize("alpha", [40.0, 50.0])
def test_equals_pytorch_metric_learning_on_unit_embeddings(form, classes, k, alpha):
    """PML normalises x_a and x_p but not x_n: it is fed unit embeddings (x / ||x||
    inside its graph, so the gradient w.r.t. the raw x compares too)."""
    from pytorch_metric_learning import losses as pml

    labels, x = pml_peer.inputs(classes, k, seed=classes + k, form=form)
    pml_peer.assert_equals_pml(Angular(alpha), pml.AngularLoss(alpha), labels, x,
                               normalize_first=True)
