"""Margin loss (weighted contrastive eq. 3, Wu et al.), the DistanceWeighted miner,
and BalancedContrastive (weighted contrastive eq. 10, 15-16, 23-25)."""


import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml import weighting
from keras_dml.losses import Margin
from keras_dml.mining import DistanceWeighted


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


def _kept_pairs(positive, negative):
    kept = np.asarray(positive) | np.asarray(negative)
    return [tuple(p) for p in np.argwhere(kept)]


# -- Margin -------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    {},
    {"alpha": 0.3, "beta": 1.0},
    {"nu": 0.1},
    {"average": "active"},
    {"alpha": 0.1, "beta": 0.8, "nu": 0.05, "average": "active"},
])
def test_margin_matches_eq3_and_autodiff(kwargs):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=1)
    loss = Margin(**kwargs)
    value, _ = checks.assert_modes_agree(loss, labels, x)
    expected = ref.margin(labels, x, kwargs.get("alpha", 0.2), kwargs.get("beta", 1.2),
                          kwargs.get("nu", 0.0), average=kwargs.get("average", "pairs"))
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    checks.assert_exact_weights(loss, labels, x)


def test_margin_per_class_beta_value_and_gradient():
    labels, x = checks.batch(classes=3, k=3, dim=5, seed=2)
    loss = Margin(num_classes=5, nu=0.1)
    loss.trainable_layer.build((None, 5))
    betas = np.array([1.0, 1.3, 1.1, 1.2, 0.9])
    loss.trainable_layer.beta.assign(betas)
    with tf.GradientTape() as tape:
        value = loss(labels, x)
    gradient = tf.convert_to_tensor(tape.gradient(value, loss.trainable_layer.beta)).numpy()
    np.testing.assert_allclose(float(value), ref.margin(labels, x, beta=betas, nu=0.1),
                               rtol=1e-5)
    # finite differences of the float64 reference, class by class
    for c in range(5):
        step = np.zeros(5)
        step[c] = 1e-5
        numeric = (ref.margin(labels, x, beta=betas + step, nu=0.1)
                   - ref.margin(labels, x, beta=betas - step, nu=0.1)) / 2e-5
        np.testing.assert_allclose(gradient[c], numeric, rtol=1e-3, atol=1e-6)
    assert gradient[3] == 0 and gradient[4] == 0  # classes absent from the batch
    checks.assert_exact_weights(loss, labels, x)


def test_margin_global_beta_gradient_and_fixed_beta():
    labels, x = checks.batch(classes=4, k=2, dim=4, seed=3)
    loss = Margin(nu=0.02)
    with tf.GradientTape() as tape:
        value = loss(labels, x)
    (gradient,) = tape.gradient(value, loss.trainable_layer.trainable_weights)
    numeric = (ref.margin(labels, x, beta=1.2 + 1e-5, nu=0.02)
               - ref.margin(labels, x, beta=1.2 - 1e-5, nu=0.02)) / 2e-5
    np.testing.assert_allclose(gradient.numpy()[0], numeric, rtol=1e-3, atol=1e-6)
    fixed = Margin(learn_beta=False)
    assert fixed.trainable_layer is None
    np.testing.assert_allclose(float(fixed(labels, x)), ref.margin(labels, x), rtol=1e-5)


def test_margin_pair_weights_are_inverse_distances_on_active_pairs():
    labels, x = checks.batch(classes=3, k=3, dim=4, seed=4)
    w = weighting.pair_weights(Margin(), labels, x)
    s = ref.similarity(x, "cosine")
    d = np.sqrt(np.maximum(2 - 2 * s, 0))
    same = labels[:, None] == labels[None, :]
    off = ~np.eye(len(labels), dtype=bool)
    active = np.where(same, d - 1.2 + 0.2 > 0, 0.2 + 1.2 - d > 0) & off
    count = off.sum()
    expected = np.where(active, 1.0 / np.where(active, d, 1.0), 0.0) / count
    np.testing.assert_allclose(w, expected, rtol=1e-4, atol=1e-7)


def test_margin_with_distance_weighted_miner_uses_the_kept_pairs():
    labels, x = checks.batch(classes=4, k=3, dim=16, seed=5)
    loss = Margin(miner=DistanceWeighted(seed=3))
    terms = loss.terms(labels, x)
    assert loss.miner._bound_dim == 16
    pairs = _kept_pairs(terms.positive, terms.negative)
    np.testing.assert_allclose(float(tf.reduce_mean(terms.value)),
                               ref.margin(labels, x, pairs=pairs), rtol=1e-5)
    for mode in ("eager", "function", "jit"):
        value, gradient = checks.value_and_gradient(loss, labels, x, mode)
        assert np.isfinite(value) and np.all(np.isfinite(gradient))


def test_margin_degenerate_and_easy_batches():
    checks.assert_degenerate_finite(Margin(miner=DistanceWeighted(seed=0)),
                                    expect_zero=("single_sample",))
    # all pairs easy: positives within beta - alpha, negatives beyond beta + alpha
    labels = np.repeat(np.arange(3), 2).astype("int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0)
    value, gradient = checks.value_and_gradient(Margin(), labels, x, "jit")
    assert value == 0.0 and not np.any(gradient)


def test_margin_per_class_label_range_is_checked():
    with pytest.raises(ValueError, match="num_classes=3"):
        Margin(num_classes=3)(np.array([0, 3, 3, 0]), np.eye(4, dtype="float32"))


def test_margin_serialization_and_mixed_precision():
    loss = Margin(alpha=0.1, beta=1.0, num_classes=7, nu=0.01, average="active",
                  miner=DistanceWeighted(cutoff=0.4, seed=2))
    clone = checks.assert_config_round_trip(loss)
    assert clone.num_classes == 7 and clone.miner.seed == 2 and clone.trainable_layer
    layer = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(loss.trainable_layer))
    assert layer.num_classes == 7 and layer.initial_value == 1.0
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=6)
    checks.assert_mixed_precision(lambda: Margin(), labels, x)


def test_margin_beta_is_trained_and_saved_by_dml_model(tmp_path):
    loss = Margin(num_classes=4, miner=DistanceWeighted(seed=0))
    model, loaded = checks.assert_save_load(loss, tmp_path, dim=8, same_loss=False)
    names = [w.path for w in model.trainable_weights]
    assert any("beta" in name for name in names), names
    trained = np.asarray(model.dml_loss.trainable_layer.beta)
    assert trained.shape == (4,) and not np.allclose(trained, 1.2)
    assert any(w is model.dml_loss.trainable_layer.beta for w in model.trainable_weights)
    restored = np.asarray(loaded.dml_loss.trainable_layer.beta)
    np.testing.assert_allclose(restored, trained)
    assert any(w is loaded.dml_loss.trainable_layer.beta for w in loaded.trainable_weights)
    assert loaded.dml_loss.miner.get_config() == loss.miner.get_config()
    # without the random miner, the loaded model's loss is the trained one
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=8)
    for restored_loss, trained_loss in ((loaded.dml_loss, model.dml_loss),):
        restored_loss.miner = trained_loss.miner = None
        np.testing.assert_allclose(float(restored_loss(labels, x)), float(trained_loss(labels, x)),
                                   rtol=1e-6)


@pytest.mark.parametrize("kwargs", [{"alpha": -0.1}, {"beta": 0.0}, {"nu": -1},
                                    {"average": "mean"}, {"num_classes": 0}])
def test_margin_bad_arguments(kwargs):
    with pytest.raises(ValueError):
        Margin(**kwargs)


# -- DistanceWeighted ---------------------------------------------------------------


def test_sphere_density_matches_reference_and_clips():
    from keras_dml.mining.distance_weighted import log_inverse_sphere_density

    d = np.array([0.1, 0.5, 0.9, 1.4142, 1.9], "float32")
    got = log_inverse_sphere_density(tf.constant(d), 128.0, 0.5).numpy()
    expected = [ref.log_inverse_sphere_density(v, 128, 0.5) for v in d]
    np.testing.assert_allclose(got, expected, rtol=1e-4)
    assert got[0] == got[1]  # clipped below at the cutoff


def test_largest_per_row_matches_sorting():
    from keras_dml.mining.distance_weighted import largest_per_row

    rng = np.random.default_rng(0)
    keys = (rng.normal(size=(7, 9)) * np.array([1e-30, 1, 1e3, 1e30, 1, 1, 1, 1, 1])).astype(
        "float32")
    keys[0, :3] = [-0.0, 0.0, -1e-38]
    candidates = rng.random((7, 9)) < 0.7
    select = tf.function(largest_per_row, jit_compile=True)
    for counts in ([0, 1, 2, 3, 9, 4, 1], [0, 1, 2, 3, 40, 4, 1]):  # argmax, bisection
        got = select(keys, candidates, np.array(counts)).numpy()
        for row in range(7):
            order = [j for j in np.argsort(-keys[row], kind="stable") if candidates[row, j]]
            expected = np.zeros(9, bool)
            expected[order[:counts[row]]] = True
            np.testing.assert_array_equal(got[row], expected, err_msg=f"{counts} {row}")


def _circle_batch():
    """Anchor 0 with one positive and negatives at known distances on a circle."""
    angles = np.array([0.0, 0.2, 0.9, 1.3, 1.6, 2.9])  # d = 2 sin(angle / 2)
    x = np.stack([np.cos(angles), np.sin(angles)], 1).astype("float32")
    labels = np.array([0, 0, 1, 2, 3, 4], "int32")
    s = x @ x.T
    return labels, x, s


def _masks(labels):
    positive = labels[:, None] == labels[None, :]
    np.fill_diagonal(positive, False)
    return tf.constant(positive), tf.constant(labels[:, None] != labels[None, :])


def test_distance_weighted_keeps_positives_and_one_negative_per_positive():
    labels, x, s = _circle_batch()
    positive, negative = _masks(labels)
    miner = DistanceWeighted(dim=4, seed=0)
    kept_positive, kept_negative = miner(tf.constant(s), positive, negative)
    np.testing.assert_array_equal(kept_positive, positive)
    kept_negative = np.asarray(kept_negative)
    assert not np.any(kept_negative & ~np.asarray(negative))
    # anchors 0 and 1 have one positive: one negative each; the others none
    np.testing.assert_array_equal(kept_negative.sum(1), [1, 1, 0, 0, 0, 0])
    two = DistanceWeighted(dim=4, seed=0, negatives_per_positive=2)
    np.testing.assert_array_equal(np.asarray(two(s, positive, negative)[1]).sum(1),
                                  [2, 2, 0, 0, 0, 0])
    many = DistanceWeighted(dim=4, seed=0, negatives_per_positive=50,
                            nonzero_loss_cutoff=None)
    np.testing.assert_array_equal(np.asarray(many(s, positive, negative)[1]),
                                  np.asarray(negative) & np.asarray(positive).any(1)[:, None])


def test_distance_weighted_never_draws_beyond_the_cutoff():
    labels, x, s = _circle_batch()
    d = np.sqrt(np.maximum(2 - 2 * s, 0))
    positive, negative = _masks(labels)
    miner = DistanceWeighted(dim=4, seed=1, nonzero_loss_cutoff=1.0)
    for _ in range(20):
        kept = np.asarray(miner(s, positive, negative)[1])
        assert np.all(d[kept] < 1.0)
    # anchor 0: only the negative at angle 0.9 (d = 0.87) is within 1.0
    assert kept[0].nonzero()[0].tolist() == [2]


def test_distance_weighted_falls_back_to_uniform_beyond_the_cutoff():
    labels, x, s = _circle_batch()
    positive, negative = _masks(labels)
    miner = DistanceWeighted(dim=4, seed=2, cutoff=0.05, nonzero_loss_cutoff=0.1)
    counts = np.zeros(6)
    for _ in range(200):
        counts += np.asarray(miner(s, positive, negative)[1])[0]
    assert counts[:2].sum() == 0 and np.all(counts[2:] > 20)  # every negative drawn


def test_distance_weighted_frequencies_follow_inverse_density():
    labels, x, s = _circle_batch()
    positive, negative = _masks(labels)
    dim = 5
    miner = DistanceWeighted(dim=dim, seed=4, nonzero_loss_cutoff=None)
    draw = tf.function(lambda: miner(tf.constant(s), positive, negative)[1][0],
                       jit_compile=True)
    trials = 3000
    counts = np.zeros(6)
    for _ in range(trials):
        counts += draw().numpy()
    d = np.sqrt(np.maximum(2 - 2 * s[0], 0))
    logw = np.array([ref.log_inverse_sphere_density(v, dim) for v in d[2:]])
    p = np.exp(logw - logw.max())
    p /= p.sum()
    freq = counts[2:] / trials
    # binomial standard errors: within 5 sigma
    np.testing.assert_array_less(np.abs(freq - p), 5 * np.sqrt(p * (1 - p) / trials) + 1e-3)


def test_distance_weighted_is_seeded_and_needs_dimension_and_cosines():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=7)
    s = _unit(x) @ _unit(x).T
    positive, negative = _masks(labels)
    first = [np.asarray(DistanceWeighted(dim=6, seed=5)(s, positive, negative)[1])
             for _ in range(2)]
    np.testing.assert_array_equal(first[0], first[1])
    miner = DistanceWeighted(dim=6, seed=5)
    draws = [np.asarray(miner(s, positive, negative)[1]) for _ in range(5)]
    assert any(not np.array_equal(draws[0], d) for d in draws[1:])
    with pytest.raises(ValueError, match="dimension"):
        DistanceWeighted()(s, positive, negative)
    with pytest.raises(ValueError, match="L2-normalised"):
        DistanceWeighted(dim=6)(3.0 * s, positive, negative)


def test_distance_weighted_config_and_bad_arguments():
    miner = DistanceWeighted(cutoff=0.3, nonzero_loss_cutoff=None, negatives_per_positive=3,
                             dim=64, seed=9)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(miner))
    assert restored.get_config() == miner.get_config()
    for kwargs in ({"cutoff": -0.1}, {"cutoff": 1.5, "nonzero_loss_cutoff": 1.4},
                   {"negatives_per_positive": 0}, {"dim": 1}, {"seed": 1.5}):
        with pytest.raises(ValueError):
            DistanceWeighted(**kwargs)


# -- BalancedContrastive ------------------------------------------------------------

from keras_dml.data.designs import GroupDesign, RandomPairDesign  # noqa: E402
from keras_dml.losses.balanced_contrastive import BalancedContrastive  # noqa: E402

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
