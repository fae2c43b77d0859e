"""The miners and the pair losses on the running Keras backend (KERAS_BACKEND): NumPy in,
no TensorFlow import, so the module runs as it is on TensorFlow, JAX and PyTorch.

Each loss's value against the NumPy loops of tests/reference*.py (float64); its gradient
w.r.t. the embeddings (the engine's W through the backend's autodiff) against a central
finite difference of the same NumPy loop; degenerate batches finite; the miners' masks
against NumPy selections.
"""

import keras
import numpy as np
import pytest

import reference as ref
from backend_checks import finite_difference
import reference_margin_softmax_and_pair_family as family
from keras_dml import losses, mining
from keras_dml.backend.gradients import value_and_gradient
from keras_dml.mining import distance_weighted

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def batch(classes=4, k=3, dim=6, seed=0, scale=1.0):
    """C x k labels (int32, shuffled) and Gaussian embeddings (float32)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), k).astype("int32")
    rng.shuffle(labels)
    return labels, (scale * rng.normal(size=(classes * k, dim))).astype("float32")


def continuous_batch(n=9, dim=5, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 2)).astype("float32"), rng.normal(size=(n, dim)).astype("float32")


COUNTS = [6, 9, 4, 12]

# name: (make the loss, NumPy loss (labels, embeddings) -> float, labels and embeddings)
CASES = {
    "triplet_all": (lambda: losses.Triplet(),
                    lambda y, x: ref.triplet(x, y, 0.1), batch()),
    "triplet_all_sorted": (lambda: losses.Triplet(),  # 17 positives: the sorting path
                           lambda y, x: ref.triplet(x, y, 0.1), batch(classes=2, k=18, dim=4)),
    "triplet_hard": (lambda: losses.Triplet(miner="HardMiner"),
                     lambda y, x: ref.triplet(x, y, 0.1, mining="hard"), batch()),
    "triplet_easy": (lambda: losses.Triplet(miner="EasyMiner"),
                     lambda y, x: ref.triplet(x, y, 0.1, mining="easy"), batch()),
    "triplet_semihard": (lambda: losses.Triplet(miner="SemiHardMiner"),
                         lambda y, x: ref.triplet(x, y, 0.1, mining="semihard"), batch(k=4)),
    "triplet_semihard_sorted": (
        lambda: losses.Triplet(miner="SemiHardMiner"),
        lambda y, x: ref.triplet(x, y, 0.1, mining="semihard"), batch(classes=2, k=18, dim=4)),
    "triplet_hard_squared": (
        lambda: losses.Triplet(metric="squared_euclidean", margin=0.5, miner="HardMiner"),
        lambda y, x: ref.triplet(x, y, 0.5, "squared_euclidean", "hard"), batch(scale=0.5)),
    "margin": (lambda: losses.Margin(), lambda y, x: ref.margin(y, x), batch()),
    "margin_active": (lambda: losses.Margin(average="active", nu=0.1),
                      lambda y, x: ref.margin(y, x, nu=0.1, average="active"), batch()),
    "multi_similarity": (lambda: losses.MultiSimilarity(),
                         lambda y, x: ref.multi_similarity(x, y), batch(scale=0.3)),
    "multi_similarity_all_pairs": (lambda: losses.MultiSimilarity(miner=None),
                                   lambda y, x: ref.multi_similarity(x, y, mining=False),
                                   batch()),
    "lifted_structure": (lambda: losses.LiftedStructure(),
                         lambda y, x: ref.lifted_structure(x, y), batch(scale=0.5)),
    "generalized_lifted": (lambda: losses.GeneralizedLiftedStructure(),
                           lambda y, x: ref.generalized_lifted(x, y), batch()),
    "binomial": (lambda: losses.BinomialDeviance(), lambda y, x: ref.binomial(x, y), batch()),
    "bin_lifted": (lambda: losses.BinLifted(), lambda y, x: ref.bin_lifted(x, y), batch()),
    "circle": (lambda: losses.Circle(), lambda y, x: family.circle(x, y), batch()),
    "histogram": (lambda: losses.Histogram(bins=21),
                  lambda y, x: ref.histogram(y, x, bins=21), batch(classes=3, k=4)),
    "balanced_contrastive": (
        lambda: losses.BalancedContrastive(class_counts=COUNTS, lam=8.0),
        lambda y, x: ref.balanced_contrastive(y, x, COUNTS, 8.0, 1.0), batch(scale=0.4)),
    "smooth_ap": (lambda: losses.SmoothAP(temperature=0.1),
                  lambda y, x: family.smooth_ap(x, y, 0.1), batch()),
    "supervised_contrastive": (lambda: losses.SupervisedContrastive(),
                               lambda y, x: family.supcon(x, y), batch()),
    "ntxent": (lambda: losses.NTXent(temperature=0.5),
               lambda y, x: family.ntxent(x, y, 0.5), batch(classes=6, k=2)),
    "multiple_negatives": (lambda: losses.MultipleNegativesRanking(scale=5.0),
                           lambda y, x: family.multiple_negatives_ranking(x, y, 5.0),
                           (np.array([0, 1, 2, 2, 3, 4], "int32"),
                            np.random.default_rng(4).normal(size=(6, 8)).astype("float32"))),
    "multiple_negatives_symmetric": (
        lambda: losses.MultipleNegativesRanking(scale=5.0, symmetric=True),
        lambda y, x: family.multiple_negatives_ranking(x, y, 5.0, symmetric=True),
        (np.arange(6, dtype="int32"),
         np.random.default_rng(5).normal(size=(6, 8)).astype("float32"))),
    "log_ratio": (lambda: losses.LogRatio(),
                  lambda y, x: ref.log_ratio(x, ref.squared_euclidean(y)), continuous_batch()),
    "log_ratio_neighbours": (
        lambda: losses.LogRatio(max_triplets_per_anchor=6),
        lambda y, x: ref.log_ratio(x, ref.squared_euclidean(y), 4), continuous_batch(seed=1)),
}


def loss_and_gradient(loss, labels, embeddings):
    """The reduced loss and d loss / d embeddings on the running backend, as NumPy."""
    labels = keras.ops.convert_to_tensor(labels)

    def total(x):
        value = loss(labels, x)
        return value, value

    value, _, gradient = value_and_gradient(total, keras.ops.convert_to_tensor(embeddings))
    return float(keras.ops.convert_to_numpy(value)), keras.ops.convert_to_numpy(gradient)


def circle_with_fixed_factors(labels, x, at, margin=0.4, gamma=80.0):
    """Circle loss with its factors alpha_p, alpha_n held at their values for embeddings
    `at` (the paper's constants in back-propagation), for its gradient."""
    s, fixed, n, total = ref.cosine(x), ref.cosine(at), len(labels), 0.0
    for i in range(n):
        pos = [j for j in range(n) if j != i and labels[j] == labels[i]]
        neg = [j for j in range(n) if labels[j] != labels[i]]
        if not pos or not neg:
            continue
        pull = sum(np.exp(-gamma * max(0.0, 1 + margin - fixed[i, j]) * (s[i, j] - 1 + margin))
                   for j in pos)
        push = sum(np.exp(gamma * max(0.0, fixed[i, j] + margin) * (s[i, j] - margin))
                   for j in neg)
        total += np.log1p(pull * push)
    return total / n


#: losses whose stated gradient is not the derivative of their value
GRADIENT_REFERENCES = {
    "circle": lambda labels, x, at: circle_with_fixed_factors(labels, x, at),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_value_and_gradient_match_the_numpy_loops(name):
    make_loss, reference, (labels, embeddings) = CASES[name]
    value, gradient = loss_and_gradient(make_loss(), labels, embeddings)
    np.testing.assert_allclose(value, reference(labels, embeddings), rtol=2e-5, atol=1e-6)
    if name in GRADIENT_REFERENCES:
        def reference(labels, x, at=embeddings.astype(np.float64)):
            return GRADIENT_REFERENCES[name](labels, x, at)
    expected = finite_difference(lambda x: reference(labels, x), embeddings)
    np.testing.assert_allclose(gradient, expected, rtol=2e-3, atol=2e-4)


def compiled(function):
    """`function` compiled as the backend's trainer compiles a train step: `jax.jit`,
    `tf.function`; PyTorch's trainer runs it eagerly."""
    name = keras.backend.backend()
    if name == "jax":
        import jax

        return jax.jit(function)
    if name == "tensorflow":
        import tensorflow as tf  # only on the TensorFlow backend

        return tf.function(function)
    return function


@pytest.mark.parametrize("name", ["triplet_semihard", "triplet_all_sorted", "multi_similarity",
                                  "smooth_ap", "multiple_negatives", "histogram", "margin",
                                  "log_ratio_neighbours"])
def test_compiled_step_matches_eager(name):
    make_loss, _, (labels, embeddings) = CASES[name]
    loss, labels = make_loss(), keras.ops.convert_to_tensor(labels)

    def step(x):
        return value_and_gradient(lambda x: (loss(labels, x),) * 2, x)

    value, _, gradient = compiled(step)(keras.ops.convert_to_tensor(embeddings))
    eager_value, eager_gradient = loss_and_gradient(make_loss(), labels, embeddings)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(value), eager_value, rtol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(gradient), eager_gradient,
                               rtol=1e-5, atol=1e-6)


DEGENERATE = {
    "no_positives": np.arange(6),
    "one_class": np.zeros(6, int),
    "k1_and_pairs": np.array([0, 1, 2, 3, 3, 4]),
    "single_sample": np.array([7]),
}


@pytest.mark.parametrize("name", sorted(n for n in CASES if "log_ratio" not in n
                                        and "balanced" not in n))
@pytest.mark.parametrize("labels_name", sorted(DEGENERATE))
def test_degenerate_batches_are_finite(name, labels_name):
    labels = DEGENERATE[labels_name].astype("int32")
    embeddings = np.random.default_rng(3).normal(size=(len(labels), 8)).astype("float32")
    value, gradient = loss_and_gradient(CASES[name][0](), labels, embeddings)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


# --- miners ------------------------------------------------------------------------


def mined(miner, labels, embeddings):
    """A miner's kept masks on the cosine similarities of a batch, as NumPy."""
    similarity = ref.cosine(embeddings).astype("float32")
    same = labels[:, None] == labels[None, :]
    positive = same & ~np.eye(len(labels), dtype=bool)
    return [keras.ops.convert_to_numpy(mask) for mask in
            miner(keras.ops.convert_to_tensor(similarity), keras.ops.convert_to_tensor(positive),
                  keras.ops.convert_to_tensor(~same))]


@pytest.mark.parametrize("miner, mining_name, shape", [
    (mining.SemiHardMiner(), "semihard", (4, 3)),
    (mining.SemiHardMiner(), "semihard", (2, 18)),  # the sorting path
    (mining.HardMiner(), "hard", (4, 3)),
    (mining.EasyMiner(), "easy", (4, 3)),
])
def test_triplet_miners_select_the_numpy_triplets(miner, mining_name, shape):
    labels, x = batch(*shape, seed=2)
    similarity = keras.ops.convert_to_tensor(ref.cosine(x).astype("float32"))
    same = labels[:, None] == labels[None, :]
    positive = keras.ops.convert_to_tensor(same & ~np.eye(len(labels), dtype=bool))
    valid, negative_index = (keras.ops.convert_to_numpy(t) for t in miner.select(
        similarity, positive, keras.ops.convert_to_tensor(~same)))
    kept = {(a, p, int(negative_index[a, p])) for a, p in zip(*np.nonzero(valid))}
    assert kept == set(ref.triplets(x, labels, mining=mining_name))
    positive_mask, negative_mask = mined(miner, labels, x)
    np.testing.assert_array_equal(positive_mask, valid)
    expected = np.zeros_like(negative_mask)
    for a, _, n in kept:
        expected[a, n] = True
    np.testing.assert_array_equal(negative_mask, expected)


def test_multi_similarity_miner_is_vthm():
    labels, x = batch(seed=5, scale=0.3)
    positive, negative = mined(mining.MultiSimilarityMiner(0.1), labels, x)
    for i, (positives, negatives) in enumerate(ref.vthm(x, labels, 0.1)):
        assert sorted(np.nonzero(positive[i])[0]) == positives
        assert sorted(np.nonzero(negative[i])[0]) == negatives


def test_pair_margin_miner_matches_numpy():
    labels, x = batch(seed=6)
    positive, negative = mined(mining.PairMarginMiner(0.3, 0.1), labels, x)
    expected_positive, expected_negative = ref.pair_margin(x, labels, 0.3, 0.1)
    np.testing.assert_array_equal(positive, expected_positive)
    np.testing.assert_array_equal(negative, expected_negative)


@pytest.mark.parametrize("most", [3, 40])  # repeated row max, and the bisection
def test_largest_per_row_is_numpy_top_k(most):
    rng = np.random.default_rng(most)
    keys = rng.normal(size=(6, 64)).astype("float32")
    candidates = rng.random((6, 64)) < 0.8
    counts = np.minimum(rng.integers(0, most + 1, size=6), candidates.sum(axis=1))
    counts[0] = most if most <= candidates[0].sum() else counts[0]
    kept = keras.ops.convert_to_numpy(distance_weighted.largest_per_row(
        keras.ops.convert_to_tensor(keys), keras.ops.convert_to_tensor(candidates),
        keras.ops.convert_to_tensor(counts.astype("int32"))))
    for row in range(6):
        order = np.argsort(-np.where(candidates[row], keys[row], -np.inf))[:counts[row]]
        assert set(np.nonzero(kept[row])[0]) == set(order)


def test_distance_weighted_draws_are_seeded_candidates():
    labels, x = batch(classes=4, k=4, dim=3, seed=7)
    first = mined(mining.DistanceWeighted(dim=3, seed=11), labels, x)
    again = mined(mining.DistanceWeighted(dim=3, seed=11), labels, x)
    for mask, same_seed in zip(first, again):
        np.testing.assert_array_equal(mask, same_seed)
    positive, negative = first
    same = labels[:, None] == labels[None, :]
    np.testing.assert_array_equal(positive, same & ~np.eye(len(labels), dtype=bool))
    distance = np.sqrt(np.maximum(2 - 2 * ref.cosine(x), 0))
    candidates = ~same & (distance < 1.4)
    candidates = np.where(candidates.any(axis=1, keepdims=True), candidates, ~same)
    assert not np.any(negative & ~candidates)
    np.testing.assert_array_equal(negative.sum(axis=1),
                                  np.minimum(positive.sum(axis=1), candidates.sum(axis=1)))
    miner = mining.DistanceWeighted(dim=3, seed=11)
    draws = [mined(miner, labels, x)[1] for _ in range(4)]  # the state advances
    assert any(np.any(draw != draws[0]) for draw in draws[1:])
