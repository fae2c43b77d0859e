"""The DistanceWeighted miner (Wu et al. 2017): sphere density, sampling, seeding."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference as ref
from keras_dml.mining import DistanceWeighted


def _unit(x):
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype("float32")


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


@pytest.mark.slow
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
