"""BalancedContrastive (weighted contrastive eq. 10, 15-16, 23-25)."""

import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml.data.designs import GroupDesign, RandomPairDesign
from keras_dml.losses import BalancedContrastive


COUNTS = [6, 9, 4, 12, 0, 7]  # training-set N_c; class 4 cannot be drawn


@pytest.mark.parametrize("lam, margin, counts", [
    (256.0, 1.0, COUNTS), (8.0, 2.0, COUNTS), (1.0, 0.5, [3, 3, 3, 3])])
def test_balanced_contrastive_is_eq15(lam, margin, counts):
    labels, x = checks.batch(classes=4, k=3, dim=5, seed=11, scale=0.4)
    loss = BalancedContrastive(class_counts=counts, lam=lam, margin=margin)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.balanced_contrastive(labels, x, counts, lam, margin),
                               rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_balanced_contrastive_without_counts_takes_the_batch_as_dataset():
    labels = np.array([0, 0, 0, 5, 5, 9, 9, 9, 9], "int32")
    x = np.random.default_rng(12).normal(size=(9, 4)).astype("float32") * 0.3
    counts = np.bincount(labels)
    np.testing.assert_allclose(float(BalancedContrastive(lam=4.0)(labels, x)),
                               ref.balanced_contrastive(labels, x, counts, lam=4.0), rtol=1e-5)


def test_eta_compares_each_positive_pair_with_lambda_negatives():
    # eq. 13-16: over the whole training set, sum_j eta_ij = lambda (N_{y_i} - 1)
    counts = [3, 5, 2, 4]
    labels = np.repeat(np.arange(4), counts).astype("int32")
    loss = BalancedContrastive(class_counts=counts, lam=10.0)
    eta = loss.negative_weights(tf.constant(labels)).numpy()
    negative = labels[:, None] != labels[None, :]
    np.testing.assert_allclose((eta * negative).sum(1), 10.0 * (np.array(counts)[labels] - 1),
                               rtol=1e-5)


def test_balanced_contrastive_with_group_design_is_eq23_and_eq25():
    design = GroupDesign(m=3, n=4)
    labels, x = checks.batch(classes=4, k=3, dim=5, seed=13, scale=0.4)
    labels = np.array([0, 1, 3, 5])[labels].astype("int32")  # drawable classes of COUNTS
    loss = BalancedContrastive(class_counts=COUNTS, design=design, lam=16.0)
    w = ref.group_importance(labels, COUNTS, 3, 4)
    np.testing.assert_allclose(loss.importance_weights(tf.constant(labels)).numpy(), w,
                               rtol=1e-5)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    np.testing.assert_allclose(value, ref.balanced_contrastive(labels, x, COUNTS, 16.0,
                                                               importance=w), rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_balanced_contrastive_with_random_design_uses_only_the_designs_pairs():
    design = RandomPairDesign(p=0.5, num_pairs=4)
    labels = np.array([1, 1, 0, 3, 5, 5, 2, 0], "int32")  # pairs (0,1) (2,3) (4,5) (6,7)
    x = np.random.default_rng(14).normal(size=(8, 4)).astype("float32") * 0.4
    loss = BalancedContrastive(class_counts=COUNTS, design=design, lam=16.0)
    w = loss.importance_weights(tf.constant(labels)).numpy()
    assert np.count_nonzero(w) == 4 and all(w[2 * t, 2 * t + 1] > 0 for t in range(4))
    value = float(loss(labels, x))
    np.testing.assert_allclose(value, ref.balanced_contrastive(labels, x, COUNTS, 16.0,
                                                               importance=w), rtol=1e-5)
    terms = loss.terms(labels, x)
    assert np.count_nonzero(np.asarray(terms.weights)) <= 4
    checks.assert_exact_weights(loss, labels, x)


def test_balanced_contrastive_degenerate_batches():
    checks.assert_degenerate_finite(BalancedContrastive(lam=4.0),
                                    expect_zero=("single_sample",))
    # all pairs easy: positives coincide, negatives beyond the margin
    labels = np.repeat(np.arange(3), 2).astype("int32")
    x = np.repeat(3.0 * np.eye(3, dtype="float32"), 2, axis=0)
    value, gradient = checks.value_and_gradient(BalancedContrastive(), labels, x, "jit")
    assert value == 0.0 and not np.any(gradient)


def test_balanced_contrastive_serialization_and_mixed_precision(tmp_path):
    loss = BalancedContrastive(class_counts=COUNTS, design=GroupDesign(m=3, n=4), lam=32.0,
                               margin=0.8)
    clone = checks.assert_config_round_trip(loss)
    assert clone.design == GroupDesign(m=3, n=4) and clone.class_counts == COUNTS
    checks.assert_save_load(BalancedContrastive(class_counts=[3, 3, 3, 3], lam=8.0), tmp_path)
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=15, scale=0.2)
    checks.assert_mixed_precision(lambda: BalancedContrastive(lam=8.0), labels, x)


def test_balanced_contrastive_bad_arguments_and_labels():
    for kwargs in ({"design": GroupDesign(m=2, n=2)}, {"class_counts": [3]},
                   {"class_counts": [[1, 2]]}, {"class_counts": [2, -1, 3]}, {"lam": 0},
                   {"margin": -1.0}, {"class_counts": [3, 3], "design": "group"}):
        with pytest.raises(ValueError):
            BalancedContrastive(**kwargs)
    x = np.eye(4, dtype="float32")
    with pytest.raises(ValueError, match="class_counts has 6"):
        BalancedContrastive(class_counts=COUNTS)(np.array([0, 0, 6, 6]), x)
    with pytest.raises(ValueError, match="class_counts 0"):
        BalancedContrastive(class_counts=COUNTS)(np.array([0, 0, 4, 4]), x)
