"""Histogram loss (MS supplementary eq. 3-9, Ustinova and Lempitsky)."""

import numpy as np
import pytest

import loss_checks as checks
import reference as ref
from keras_dml import weighting
from keras_dml.losses import Histogram
from keras_dml.mining import MultiSimilarityMiner


@pytest.mark.slow
@pytest.mark.parametrize("bins, k, seed", [(2, 3, 0), (5, 3, 1), (11, 4, 2), (101, 3, 3),
                                           (256, 2, 4)])
def test_value_matches_eq3_and_weights_are_eq9_and_autodiff(bins, k, seed):
    labels, x = checks.batch(classes=4, k=k, dim=5, seed=seed)
    loss = Histogram(bins=bins)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.histogram(labels, x, bins), rtol=1e-5, atol=1e-7)
    # eq. 9 (and its mirror for negatives) are the exact derivatives: autodiff agrees
    weights = checks.assert_exact_weights(loss, labels, x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(weights, ref.histogram_eq9_weights(labels, x, bins),
                               rtol=1e-4, atol=1e-6)


def test_value_is_one_scalar_and_pair_weights_are_not_divided_by_n():
    labels, x = checks.batch(classes=3, k=3, dim=4, seed=5)
    loss = Histogram(bins=21)
    terms = loss.terms(labels, x)
    assert terms.value.shape.rank == 0
    w = weighting.pair_weights(loss, labels, x)
    np.testing.assert_allclose(w, np.abs(ref.histogram_eq9_weights(labels, x, 21)), rtol=1e-4,
                               atol=1e-7)
    assert np.all(w >= 0)


def test_positive_weight_is_share_of_negatives_in_its_bin():
    # Eq. 9: a positive pair in [t_p, t_p+1] is weighted h_p^- / (Delta |S+|).
    bins = 5  # nodes -1, -0.5, 0, 0.5, 1
    angles = np.array([0.0, 0.3, 2.0, 2.2])  # two classes on the unit circle
    x = np.stack([np.cos(angles), np.sin(angles)], 1).astype("float32")
    labels = np.array([0, 0, 1, 1], "int32")
    h_pos, h_neg, _, step, n_pos, n_neg = ref.histograms(labels, x, bins)
    w = weighting.pair_weights(Histogram(bins=bins), labels, x)
    s = np.cos(angles[:, None] - angles[None, :])
    p = int(np.floor((s[0, 1] + 1) / step))
    np.testing.assert_allclose(w[0, 1], h_neg[p] / (step * n_pos), rtol=1e-5)
    q = int(np.floor((s[0, 2] + 1) / step))
    np.testing.assert_allclose(w[0, 2], h_pos[q + 1] / (step * n_neg), rtol=1e-5, atol=1e-8)


def test_separated_and_reversed_batches():
    # all pairs easy: every positive more similar than every negative, bins apart
    labels = np.repeat(np.arange(3), 2).astype("int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0)
    x += 0.01 * np.random.default_rng(0).normal(size=x.shape).astype("float32")
    value, gradient = checks.value_and_gradient(Histogram(bins=11), labels, x, "jit")
    assert value == 0.0 and not np.any(gradient)
    # reversed: negatives identical, positives opposite -> probability 1
    labels = np.array([0, 1, 0, 1], "int32")
    x = np.array([[1, 0], [1, 0], [-1, 0], [-1, 0]], "float32")
    x[:, 1] = [0.0, 1e-3, 0.0, 1e-3]
    np.testing.assert_allclose(float(Histogram(bins=11)(labels, x)), 1.0, atol=1e-3)


def test_degenerate_batches():
    checks.assert_degenerate_finite(Histogram(),
                                    expect_zero=("no_positives", "one_class", "single_sample"))


def test_miner_restricts_histograms_to_kept_pairs():
    labels, x = checks.batch(classes=3, k=3, dim=4, seed=6)
    loss = Histogram(bins=21, miner=MultiSimilarityMiner(0.1))
    terms = loss.terms(labels, x)
    kept = np.asarray(terms.positive) | np.asarray(terms.negative)
    assert np.all(np.asarray(terms.weights)[~kept] == 0)
    checks.assert_exact_weights(loss, labels, x)


def test_serialization_save_load_and_mixed_precision(tmp_path):
    clone = checks.assert_config_round_trip(Histogram(bins=51, miner=MultiSimilarityMiner()))
    assert clone.bins == 51
    checks.assert_save_load(Histogram(bins=51), tmp_path)
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=7)
    checks.assert_mixed_precision(lambda: Histogram(bins=51), labels, x)


@pytest.mark.parametrize("bins", [1, 0, 2.5, True, "many"])
def test_bad_bins(bins):
    with pytest.raises(ValueError, match="bins"):
        Histogram(bins=bins)
