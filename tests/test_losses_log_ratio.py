"""LogRatio: the log-ratio loss for continuous labels with dense triplets."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml.losses
import reference as ref
from keras_dml import weighting
from keras_dml.losses import LogRatio
from keras_dml.models import DMLModel


def batch(n=10, dim=6, m=2, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, m)).astype("float32"),
            rng.normal(size=(n, dim)).astype("float32"))


@keras.saving.register_keras_serializable(package="keras_dml_tests")
def manhattan(y):
    return tf.reduce_sum(tf.abs(y[:, None, :] - y[None, :, :]), axis=2)


@pytest.mark.parametrize("n, m, max_triplets, epsilon", [
    (10, 2, None, 1e-6),
    (7, 3, None, 1e-3),
    (12, 1, 6, 1e-6),      # 4 partners per anchor
    (9, 2, 1, 1e-6),       # 2 partners: one triplet per anchor
    (3, 2, None, 1e-6),    # the smallest batch with a triplet
])
def test_matches_triplet_loop_and_autodiff(n, m, max_triplets, epsilon):
    y, x = batch(n=n, m=m, seed=n)
    loss = LogRatio(max_triplets_per_anchor=max_triplets, epsilon=epsilon)
    partners = loss.max_partners
    expected = ref.log_ratio(x, ref.squared_euclidean(y), partners, epsilon)
    np.testing.assert_allclose(float(loss(y, x)), expected, rtol=1e-5, atol=1e-6)
    autodiff, weights = weighting.autodiff_weights(loss, y, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


def test_max_partners_is_the_largest_n_within_the_triplet_budget():
    for budget, partners in [(1, 2), (2, 2), (3, 3), (5, 3), (6, 4), (45, 10), (44, 9)]:
        assert LogRatio(max_triplets_per_anchor=budget).max_partners == partners


def test_label_distance_callable_and_precomputed_match_the_loop():
    y, x = batch(n=8, seed=2)
    manhattan_np = np.abs(y[:, None, :] - y[None, :, :]).sum(axis=2)
    expected = ref.log_ratio(x, manhattan_np)
    np.testing.assert_allclose(float(LogRatio(label_distance=manhattan)(y, x)), expected,
                               rtol=1e-5)
    table = np.random.default_rng(0).uniform(0.1, 2.0, size=(20, 20)).astype("float32")
    table = (table + table.T) / 2
    np.fill_diagonal(table, 0.0)
    indices = np.array([3, 17, 0, 5, 9, 12, 1, 19])
    loss = LogRatio(label_distance=table)
    np.testing.assert_allclose(float(loss(indices, x)),
                               ref.log_ratio(x, table[np.ix_(indices, indices)]), rtol=1e-5)
    np.testing.assert_allclose(float(LogRatio(label_distance="euclidean")(y, x)),
                               ref.log_ratio(x, np.sqrt(ref.squared_euclidean(y))), rtol=1e-5)


def test_loss_is_zero_when_embedding_distances_are_proportional_to_label_distances():
    y, _ = batch(n=9, m=3, seed=4)
    # f = 2 y: D(f) = 4 D_y, every log ratio agrees.
    assert float(LogRatio()(y, 2.0 * y)) < 1e-6


def test_eager_function_and_xla_agree():
    y, x = batch(n=16, seed=5)
    for loss in [LogRatio(), LogRatio(max_triplets_per_anchor=10)]:
        eager = float(loss(y, x))
        graph = float(tf.function(loss)(y, x))
        xla = float(tf.function(loss, jit_compile=True)(y, x))
        np.testing.assert_allclose([graph, xla], [eager, eager], rtol=1e-5)


def test_pair_weights_mark_pulled_and_pushed_pairs():
    y, x = batch(n=8, seed=6)
    loss = LogRatio()
    terms = loss.terms(y, x)
    weights = weighting.pair_weights(loss, y, x)
    assert weights.shape == (8, 8) and np.all(weights >= 0)
    np.testing.assert_allclose(weights, np.abs(terms.weights) / 8, rtol=1e-6)
    pull = np.asarray(terms.positive)
    assert np.all(np.asarray(terms.weights)[pull] > 0) and not np.any(np.diag(pull))


@pytest.mark.parametrize("labels, message", [
    (np.arange(6) % 3, "continuous label vectors.*int64.*class ids"),
    (np.zeros(6, "float32"), r"shape \(N, m\).*\(6,\)"),
    (np.zeros((5, 2), "float32"), "batch size"),
    (np.full((6, 2), np.nan, "float32"), "NaN"),
])
def test_bad_labels_are_clear_errors(labels, message):
    x = np.zeros((6, 4), "float32")
    with pytest.raises(ValueError, match=message):
        LogRatio()(labels, x)


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="label_distance"):
        LogRatio(label_distance="cosine")
    with pytest.raises(ValueError, match="square"):
        LogRatio(label_distance=np.zeros((3, 4)))
    with pytest.raises(ValueError, match="max_triplets_per_anchor"):
        LogRatio(max_triplets_per_anchor=0)
    with pytest.raises(ValueError, match=r"\[0, 4\).*\[7\]"):
        LogRatio(label_distance=np.zeros((4, 4)))(np.array([0, 7, 1]), np.zeros((3, 2), "f"))


def test_degenerate_batches_are_finite():
    for y, x in [
        (np.zeros((2, 2), "float32"), np.ones((2, 3), "float32")),       # no triplet
        (np.zeros((5, 2), "float32"), np.ones((5, 3), "float32")),       # all coincide
        (np.ones((1, 2), "float32"), np.ones((1, 3), "float32")),
    ]:
        x_var = tf.Variable(x)
        with tf.GradientTape() as tape:
            value = LogRatio()(y, x_var)
        assert np.isfinite(float(value))
        assert np.all(np.isfinite(tape.gradient(value, x_var)))


def test_mixed_float16_matches_float32():
    y, x = batch(n=12, seed=7)
    expected = float(LogRatio()(y, x))
    policy = keras.config.dtype_policy()
    try:
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        value = LogRatio()(y, tf.constant(x, tf.float16))
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    assert value.dtype == tf.float32
    np.testing.assert_allclose(float(value), expected, rtol=1e-3)


@pytest.mark.parametrize("loss", [
    LogRatio(),
    LogRatio(label_distance="euclidean", max_triplets_per_anchor=20, epsilon=1e-4),
    LogRatio(label_distance=manhattan),
    LogRatio(label_distance=np.eye(3, dtype="float32")),
])
def test_config_round_trip(loss):
    config = loss.get_config()
    clone = LogRatio.from_config(config)
    assert clone.get_config() == config
    assert keras.losses.get({"class_name": "keras_dml>LogRatio", "config": config}) \
        .get_config() == config
    assert isinstance(keras_dml.losses.get("keras_dml>LogRatio"), LogRatio)


def test_trains_saves_and_reloads_in_a_dml_model(tmp_path):
    rng = np.random.default_rng(0)
    angles = rng.uniform(0, 2 * np.pi, size=64)
    y = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype("float32")
    x = np.concatenate([y, rng.normal(size=(64, 6))], axis=1).astype("float32")
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,))
    model = DMLModel(inputs, keras.layers.Dense(4)(keras.layers.Dense(16, "tanh")(inputs)))
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=LogRatio())
    start = float(LogRatio()(y, model(x)))
    model.fit(np.tile(x, (30, 1)), np.tile(y, (30, 1)), batch_size=64, shuffle=False, verbose=0)
    trained = float(LogRatio()(y, model(x)))
    assert trained < 0.5 * start
    path = str(tmp_path / "log_ratio.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(float(LogRatio()(y, restored(x))), trained, rtol=1e-5)
