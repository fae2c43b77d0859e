"""IntraPairVariance (keras_dml/losses/intra_pair_variance.py): the paper's loop on
similarities and distances, pytorch-metric-learning 2.9's `IntraPairVarianceLoss`,
the paper's combination with TupletMargin and the hyperparameters. The contract
(modes, W against autodiff, config, precision, degenerate batches):
tests/test_losses_contract.py."""

import numpy as np
import pytest

import loop_checks
import pml_peer
import reference_ranked_tuplet_angular_snr as loops
from keras_dml.losses import Combined, IntraPairVariance, TupletMargin

CASES = {
    "cosine": (lambda: IntraPairVariance(),
               lambda x, y: loops.intra_pair_variance(x, y)),
    "cosine-eps": (lambda: IntraPairVariance(0.1, 0.05),
                   lambda x, y: loops.intra_pair_variance(x, y, 0.1, 0.05)),
    "euclidean": (lambda: IntraPairVariance(0.1, 0.05, metric="euclidean"),
                  lambda x, y: loops.intra_pair_variance(x, y, 0.1, 0.05, "euclidean")),
    "squared": (lambda: IntraPairVariance(metric="squared_euclidean"),
                lambda x, y: loops.intra_pair_variance(x, y, metric="squared_euclidean")),
    "dot": (lambda: IntraPairVariance(0.2, 0.2, metric="dot"),
            lambda x, y: loops.intra_pair_variance(x, y, 0.2, 0.2, "dot")),
}


test_value_matches_the_papers_loop_with_exact_weights = loop_checks.loop_test(CASES, seed=5)


def test_combined_with_tuplet_margin_is_the_papers_total():
    labels, x = loop_checks.labelled("cxk", seed=6)
    total = float(Combined([TupletMargin(), IntraPairVariance()])(labels, x))
    np.testing.assert_allclose(total, loops.tuplet_margin(x, labels)
                               + loops.intra_pair_variance(x, labels), rtol=1e-5)


test_bad_hyperparameters = loop_checks.refusal_test([
    (lambda: IntraPairVariance(pos_eps=float("nan")), "pos_eps"),
    (lambda: IntraPairVariance(neg_eps="a"), "neg_eps"),
    (lambda: IntraPairVariance(metric="snr"), "metric"),
])


@pml_peer.peer_test  # slow: PyTorch and PML, over batch sizes and raw / unit inputs
@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_equals_pytorch_metric_learning(form, classes, k, metric):
    """Cosine: PML's default. Euclidean: PML's `LpDistance(normalize_embeddings=False)`
    (its default `LpDistance()` has the same value on unit inputs; its gradient w.r.t.
    them differs by its normalisation's, which "euclidean" does not have)."""
    from pytorch_metric_learning import distances, losses as pml

    labels, x = pml_peer.inputs(classes, k, seed=classes * k, form=form)
    distance = (distances.CosineSimilarity() if metric == "cosine"
                else distances.LpDistance(normalize_embeddings=False))
    pml_peer.assert_equals_pml(IntraPairVariance(0.1, 0.05, metric=metric),
                               pml.IntraPairVarianceLoss(0.1, 0.05, distance=distance),
                               labels, x)
