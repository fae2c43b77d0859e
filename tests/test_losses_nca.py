"""NCA (MS supplementary eq. 1-2)."""

import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml import weighting
from keras_dml.losses import NCA
from keras_dml.mining import MultiSimilarityMiner


@pytest.mark.slow
@pytest.mark.parametrize("scale, metric", [
    (1.0, "cosine"), (16.0, "cosine"), (0.5, "squared_euclidean"), (2.0, "euclidean"),
    (3.0, "dot"),
])
def test_nca_matches_reference_and_autodiff(scale, metric):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=7, scale=0.4)
    loss = NCA(scale=scale, metric=metric)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.nca(labels, x, scale, metric), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_nca_weights_are_eq2_times_scale():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=8)
    scale = 4.0
    w = weighting.pair_weights(NCA(scale=scale), labels, x)
    s = ref.similarity(x, "cosine")
    n = len(labels)
    for i in range(n):
        others = [k for k in range(n) if k != i]
        same = [k for k in others if labels[k] == labels[i]]
        total = sum(np.exp(scale * s[i, k]) for k in others)
        same_total = sum(np.exp(scale * s[i, k]) for k in same)
        for j in others:
            e = np.exp(scale * s[i, j])
            eq2 = e / same_total - e / total if j in same else e / total
            np.testing.assert_allclose(w[i, j], scale * eq2 / n, rtol=1e-4, atol=1e-7)


def test_nca_equivalence_of_metrics_on_the_sphere():
    labels, x = checks.batch(classes=3, k=4, dim=6, seed=9)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    cosine = float(NCA(scale=2.0, metric="cosine")(labels, x))
    squared = float(NCA(scale=1.0, metric="squared_euclidean")(labels, x))
    np.testing.assert_allclose(cosine, squared, rtol=1e-5)


@pytest.mark.slow
def test_nca_degenerate_batches():
    # one class: every neighbour is of the own class, -log 1 = 0
    checks.assert_degenerate_finite(NCA(scale=8.0),
                                    expect_zero=("no_positives", "one_class", "single_sample"))


def test_nca_with_miner_uses_only_kept_pairs():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=10)
    miner = MultiSimilarityMiner(0.05)
    terms = NCA(miner=miner).terms(labels, x)
    kept = tf.logical_or(terms.positive, terms.negative).numpy()
    w = np.asarray(terms.weights)
    assert np.all(w[~kept] == 0)
    checks.assert_exact_weights(NCA(miner=miner), labels, x)


@pytest.mark.slow
def test_nca_serialization_and_mixed_precision(tmp_path):
    loss = NCA(scale=8.0, metric="squared_euclidean")
    assert checks.assert_config_round_trip(loss).scale == 8.0
    checks.assert_save_load(NCA(scale=4.0), tmp_path)
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=11)
    checks.assert_mixed_precision(lambda: NCA(scale=8.0), labels, x)


@pytest.mark.parametrize("kwargs", [{"scale": 0.0}, {"scale": "x"}, {"metric": "l1"}])
def test_nca_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        NCA(**kwargs)
