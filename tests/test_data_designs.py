import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from keras_dml.data import (GroupDesign, RandomPairDesign, design_batches, design_sampler,
                            importance_weights)
from reference_data import (contrastive_terms, full_contrastive_mean,
                                  group_design_q, random_design_q)

COUNTS = np.array([2, 3, 4, 5, 7])


def _all_pairs(counts):
    labels = np.repeat(np.arange(len(counts)), counts)
    i, j = np.meshgrid(np.arange(len(labels)), np.arange(len(labels)), indexing="ij")
    off = i != j
    return labels, i[off], j[off]


@pytest.mark.parametrize("m,n", [(2, 2), (2, 3), (3, 2)])
def test_group_weights_are_inverse_of_eq9_q(m, n):
    counts = np.where(COUNTS >= m, COUNTS, 0)
    labels, i, j = _all_pairs(counts)
    design = GroupDesign(m=m, n=n)
    w = design.pair_weights(labels[i], labels[j], counts).numpy()
    q = np.array([group_design_q(a, b, counts, m, n) for a, b in zip(labels[i], labels[j])])
    total = counts.sum()
    np.testing.assert_allclose(q.sum(), 1.0, rtol=1e-12)  # Q is a distribution
    np.testing.assert_allclose(w, 1.0 / (total * (total - 1) * q), rtol=1e-5)


@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_random_weights_are_inverse_of_eq8_q(p):
    labels, i, j = _all_pairs(COUNTS)
    w = RandomPairDesign(p=p, num_pairs=4).pair_weights(labels[i], labels[j], COUNTS).numpy()
    q = np.array([random_design_q(a, b, COUNTS, p) for a, b in zip(labels[i], labels[j])])
    total = COUNTS.sum()
    np.testing.assert_allclose(q.sum(), 1.0, rtol=1e-12)
    np.testing.assert_allclose(w, 1.0 / (total * (total - 1) * q), rtol=1e-5)


def _pair_frequencies(batches, num_samples, pairs_of):
    freq = np.zeros((num_samples, num_samples))
    for batch in batches:
        i, j = pairs_of(batch)
        np.add.at(freq, (i, j), 1)
    return freq / freq.sum()


@pytest.mark.slow
def test_samplers_draw_pairs_with_the_paper_q():
    labels, i, j = _all_pairs(COUNTS)
    num = len(labels)
    rows, cols = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    off = rows != cols
    group = design_sampler(GroupDesign(m=2, n=3), labels, seed=0)
    freq = _pair_frequencies((group.next_batch() for _ in range(12000)), num,
                             lambda b: (b[rows[off]], b[cols[off]]))
    q = np.array([group_design_q(a, b, COUNTS, 2, 3) for a, b in zip(labels[i], labels[j])])
    draws = 12000 * 30
    se = np.sqrt(q * (1 - q) / draws)
    assert np.max(np.abs(freq[i, j] - q) / se) < 5

    rand = design_sampler(RandomPairDesign(p=0.3, num_pairs=50), labels, seed=0)
    freq = _pair_frequencies((rand.next_batch() for _ in range(4000)), num,
                             lambda b: (b[0::2], b[1::2]))
    q = np.array([random_design_q(a, b, COUNTS, 0.3) for a, b in zip(labels[i], labels[j])])
    se = np.sqrt(q * (1 - q) / (4000 * 50))
    assert np.max(np.abs(freq[i, j] - q) / se) < 5


def test_importance_weight_matrix_layouts():
    counts = np.array([4, 6, 8])
    y = tf.constant([0, 0, 1, 1, 2, 2])
    design = GroupDesign(m=2, n=3)
    w = importance_weights(y, counts, design).numpy()
    assert np.all(np.diag(w) == 0) and np.all(w[~np.eye(6, dtype=bool)] > 0)
    np.testing.assert_allclose(w[0, 2], design.pair_weights(0, 1, counts).numpy())
    rand = RandomPairDesign(p=0.5, num_pairs=3)
    w = importance_weights(tf.constant([0, 0, 1, 2, 2, 1]), counts, rand).numpy()
    assert np.count_nonzero(w) == 3 and w[0, 1] > 0 and w[2, 3] > 0 and w[4, 5] > 0
    fn = tf.function(lambda labels: importance_weights(labels, counts, design))
    np.testing.assert_allclose(fn(y).numpy(), importance_weights(y, counts, design).numpy())


def test_design_validation():
    with pytest.raises(ValueError, match="m >= 2"):
        GroupDesign(m=1, n=4)
    with pytest.raises(ValueError, match="p must"):
        RandomPairDesign(p=1.0, num_pairs=3)
    with pytest.raises(ValueError, match="at least 2"):
        design_sampler(RandomPairDesign(p=0.5, num_pairs=3), np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="GroupDesign or RandomPairDesign"):
        importance_weights([0, 1], [1, 1], "group")


def _imbalanced_digits():
    """All 10 digits, class c subsampled to 20 + 15 c images; raw pixels, L2-normalised."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    keep = np.concatenate([np.flatnonzero(bunch.target == c)[:20 + 15 * c]
                           for c in range(10)])
    emb = bunch.data[keep].astype(np.float64)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    return emb, bunch.target[keep]


def _estimates(design, emb, labels, batches, margin):
    counts = design.class_counts(labels)
    batches = np.stack(batches)
    y = labels[batches]
    if isinstance(design, GroupDesign):
        a, b = emb[batches][:, :, None], emb[batches][:, None, :]
        same = y[:, :, None] == y[:, None, :]
        terms = contrastive_terms(a, b, same, margin)
        weights = design.pair_weights(y[:, :, None], y[:, None, :], counts).numpy()
        off = ~np.eye(batches.shape[1], dtype=bool)
        return (weights * terms)[:, off].mean(1), terms[:, off].mean(1)
    a, b = emb[batches[:, 0::2]], emb[batches[:, 1::2]]
    terms = contrastive_terms(a, b, y[:, 0::2] == y[:, 1::2], margin)
    weights = design.pair_weights(y[:, 0::2], y[:, 1::2], counts).numpy()
    return (weights * terms).mean(1), terms.mean(1)


@pytest.mark.parametrize("design", [GroupDesign(m=3, n=4), RandomPairDesign(p=0.5, num_pairs=32)])
def test_importance_weighted_batch_loss_is_unbiased_on_real_data(design):
    emb, labels = _imbalanced_digits()
    margin = 0.8
    exact = full_contrastive_mean(emb, labels, margin)
    sampler = design_sampler(design, labels, seed=0)
    weighted, plain = _estimates(design, emb, labels,
                                 [sampler.next_batch() for _ in range(3000)], margin)
    se = weighted.std(ddof=1) / np.sqrt(len(weighted))
    assert abs(weighted.mean() - exact) < 4 * se, (weighted.mean(), exact, se)
    # The unweighted batch mean is biased: the test can tell the difference.
    se_plain = plain.std(ddof=1) / np.sqrt(len(plain))
    assert abs(plain.mean() - exact) > 10 * se_plain


def test_design_batches_pipeline():
    split = keras_dml.datasets.load("digits").train
    design = GroupDesign(m=2, n=5)
    xb, yb = next(iter(design_batches(split, design, seed=0)))
    assert xb.shape == (10, 8, 8, 1)
    rand = RandomPairDesign(p=0.5, num_pairs=6)
    xb, yb = next(iter(design_batches(split, rand, seed=0)))
    assert xb.shape == (12, 8, 8, 1)
    w = importance_weights(yb, np.bincount(split.labels), rand).numpy()
    assert np.count_nonzero(w) == 6
