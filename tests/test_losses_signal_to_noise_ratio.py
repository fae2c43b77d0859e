"""SignalToNoiseRatioContrastive (keras_dml/losses/signal_to_noise_ratio.py): the SNR
distance, the paper's loop, pytorch-metric-learning 2.9's
`SignalToNoiseRatioContrastiveLoss` and the hyperparameters. The contract (modes, W
against autodiff, config, reference sets, precision, degenerate batches):
tests/test_losses_contract.py."""

import keras
import numpy as np
import pytest

import loop_checks
import pml_peer
import reference_ranked_tuplet_angular_snr as loops
from keras_dml.losses import SignalToNoiseRatioContrastive
from keras_dml.losses.signal_to_noise_ratio import snr_distances

CASES = {
    "defaults": (lambda: SignalToNoiseRatioContrastive(),
                 lambda x, y: loops.snr_contrastive(x, y)),
    "margins-raw": (lambda: SignalToNoiseRatioContrastive(0.2, 1.5, normalize=False),
                    lambda x, y: loops.snr_contrastive(x, y, 0.2, 1.5, normalize=False)),
}


@pytest.mark.parametrize("normalize", [True, False])
def test_snr_distance_is_the_variance_ratio(normalize):
    rng = np.random.default_rng(9)
    query, key = rng.normal(size=(5, 7)), rng.normal(size=(4, 7)) + 0.5
    both = np.concatenate([query, key])
    expected = [[loops.snr_distance(both, i, 5 + j, normalize) for j in range(4)]
                for i in range(5)]
    got = keras.ops.convert_to_numpy(snr_distances(query.astype("float32"),
                                                   key.astype("float32"), normalize))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    square = keras.ops.convert_to_numpy(snr_distances(query.astype("float32")))
    assert not np.allclose(square, square.T)  # var(x_i) differs: not symmetric


test_value_matches_the_papers_loop_with_exact_weights = loop_checks.loop_test(CASES, seed=10)


test_bad_hyperparameters = loop_checks.refusal_test([
    (lambda: SignalToNoiseRatioContrastive(pos_margin=float("inf")), "pos_margin"),
    (lambda: SignalToNoiseRatioContrastive(normalize="yes"), "normalize"),
])


@pml_peer.peer_test  # slow: PyTorch and PML, over batch sizes and raw / unit inputs
@pytest.mark.parametrize("normalize", [True, False])
@pytest.mark.parametrize("margins", [(0.0, 1.0), (0.2, 1.5)], ids=["defaults", "margins"])
def test_equals_pytorch_metric_learning(form, classes, k, normalize, margins):
    """PML's `SNRDistance()` (unit vectors first) or `SNRDistance(normalize_embeddings=False)`."""
    from pytorch_metric_learning import distances, losses as pml

    labels, x = pml_peer.inputs(classes, k, seed=3 * classes + k, form=form)
    theirs = pml.SignalToNoiseRatioContrastiveLoss(
        pos_margin=margins[0], neg_margin=margins[1],
        distance=distances.SNRDistance(normalize_embeddings=normalize))
    pml_peer.assert_equals_pml(SignalToNoiseRatioContrastive(*margins, normalize=normalize),
                               theirs, labels, x)
