"""RankedList (keras_dml/losses/ranked_list.py): the paper's loop on both metrics,
pytorch-metric-learning 2.9's `RankedListLoss`, signed weights, large temperatures and
the hyperparameters. The contract (modes, W against autodiff, config, reference sets,
precision, degenerate batches): tests/test_losses_contract.py."""

import numpy as np
import pytest

import loop_checks
import pml_peer
import reference_ranked_tuplet_angular_snr as loops
from keras_dml import weighting
from keras_dml.losses import RankedList

CASES = {
    "defaults": (lambda: RankedList(), lambda x, y: loops.ranked_list(x, y)),
    "weighted": (lambda: RankedList(0.5, 5.0, 0.3, 1.1, 2.0),
                 lambda x, y: loops.ranked_list(x, y, 0.5, 5.0, 0.3, 1.1, 2.0)),
    "euclidean": (lambda: RankedList(1.0, 1.0, alpha=3.5, metric="euclidean"),
                  lambda x, y: loops.ranked_list(x, y, 1.0, 1.0, alpha=3.5, metric="euclidean")),
    "hot": (lambda: RankedList(Tn=200.0, Tp=50.0),
            lambda x, y: loops.ranked_list(x, y, tn=200.0, tp=50.0)),
}


test_value_matches_the_papers_loop_with_exact_weights = loop_checks.loop_test(CASES, seed=7)


def test_weighted_averages_have_negative_exact_pair_weights():
    """With Tn > 0 the weights of the average are differentiated: some pairs' exact
    weights are negative; with equal weights (Tn = Tp = 0) none is."""
    labels, x = loop_checks.labelled("cxk", seed=8)
    signed = weighting.pair_weights(RankedList(Tn=10.0), labels, x)
    assert np.any(signed < 0) and np.any(signed > 0)
    assert np.all(weighting.pair_weights(RankedList(Tn=0.0), labels, x) >= 0)


test_bad_hyperparameters = loop_checks.refusal_test([
    (lambda: RankedList(imbalance=1.5), "imbalance"),
    (lambda: RankedList(Tn=-1), "Tn"),
    (lambda: RankedList(Tp=float("nan")), "Tp"),
    (lambda: RankedList(alpha="a"), "alpha"),
    (lambda: RankedList(metric="dot"), "metric"),
])


def test_alpha_defaults_to_one_plus_half_the_margin():
    assert RankedList(margin=0.6).alpha == pytest.approx(1.3)
    assert RankedList(margin=0.6, alpha=2.0).alpha == 2.0


@pml_peer.peer_test  # slow: PyTorch and PML, over batch sizes and raw / unit inputs
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("setting", [(0.4, 10.0, 0.5, None, 0.0), (0.5, 5.0, 0.3, 1.1, 2.0)],
                         ids=["simpler", "weighted"])
def test_equals_pytorch_metric_learning(form, classes, k, metric, setting):
    """Cosine: PML's default `LpDistance()` (unit vectors). Euclidean: its
    `LpDistance(normalize_embeddings=False)`, with alpha scaled to the raw distances."""
    from pytorch_metric_learning import distances, losses as pml

    labels, x = pml_peer.inputs(classes, k, seed=classes + 2 * k, form=form)
    margin, tn, imbalance, alpha, tp = setting
    if metric == "euclidean" and form == "raw":
        margin, alpha = 2.0, 6.0  # raw Gaussian points in 16 dimensions lie ~5.7 apart
    distance = distances.LpDistance(normalize_embeddings=metric == "cosine")
    pml_peer.assert_equals_pml(
        RankedList(margin, tn, imbalance, alpha, tp, metric=metric),
        pml.RankedListLoss(margin, tn, imbalance, alpha, tp, distance=distance), labels, x)
