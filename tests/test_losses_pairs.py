"""Contrastive, Triplet, lifted structure, binomial deviance, BinLifted and MS/RAW."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from keras_dml import mining
from keras_dml.losses import (
    BinLifted,
    BinomialDeviance,
    Contrastive,
    GeneralizedLiftedStructure,
    LiftedStructure,
    MultiSimilarity,
    RelativeAbsoluteWeighting,
    Triplet,
)
from keras_dml.models import DMLModel
from keras_dml.weighting import autodiff_weights, pair_weights

import reference as ref
from loss_checks import assert_config_round_trip, traced_tensor_shapes, value_and_gradient


def _batch(classes=4, per_class=3, dim=6, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class).astype("int32")
    rng.shuffle(labels)
    return labels, (scale * rng.normal(size=(classes * per_class, dim))).astype("float32")


def _uneven(seed=1):
    """Classes of sizes 4, 3, 2, 1 and 1 (singletons have no positive)."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4], "int32")
    return labels, rng.normal(size=(len(labels), 5)).astype("float32")


# (id, loss factory, reference loop) -- several hyperparameter settings per loss.
CASES = [
    ("contrastive_cos", lambda: Contrastive(), lambda x, y: ref.contrastive(x, y)),
    ("contrastive_cos_m", lambda: Contrastive(pos_margin=0.8, neg_margin=0.1),
     lambda x, y: ref.contrastive(x, y, "cosine", 0.8, 0.1)),
    ("contrastive_euc", lambda: Contrastive("euclidean", neg_margin=2.5),
     lambda x, y: ref.contrastive(x, y, "euclidean", 0.0, 2.5)),
    ("contrastive_euc_m", lambda: Contrastive("euclidean", pos_margin=1.0, neg_margin=3.0),
     lambda x, y: ref.contrastive(x, y, "euclidean", 1.0, 3.0)),
    ("triplet_all", lambda: Triplet(margin=0.3), lambda x, y: ref.triplet(x, y, 0.3)),
    ("triplet_hard", lambda: Triplet(mining="hard"),
     lambda x, y: ref.triplet(x, y, 0.1, mining="hard")),
    ("triplet_semihard", lambda: Triplet(margin=0.4, mining="semihard"),
     lambda x, y: ref.triplet(x, y, 0.4, mining="semihard")),
    ("triplet_easy", lambda: Triplet(mining="easy", margin=0.5),
     lambda x, y: ref.triplet(x, y, 0.5, mining="easy")),
    ("triplet_sq_all", lambda: Triplet(metric="squared_euclidean", margin=2.0),
     lambda x, y: ref.triplet(x, y, 2.0, "squared_euclidean")),
    ("triplet_euc_semihard", lambda: Triplet(metric="euclidean", margin=1.0,
                                             mining="semihard"),
     lambda x, y: ref.triplet(x, y, 1.0, "euclidean", "semihard")),
    ("triplet_miner_margin", lambda: Triplet(margin=0.2, miner=mining.SemiHardMiner(0.2)),
     lambda x, y: ref.triplet(x, y, 0.2, mining="semihard", miner_margin=0.2)),
    ("lifted", lambda: LiftedStructure(), lambda x, y: ref.lifted_structure(x, y)),
    ("lifted_m", lambda: LiftedStructure(margin=3.0),
     lambda x, y: ref.lifted_structure(x, y, 3.0)),
    ("lifted_cos", lambda: LiftedStructure(0.5, metric="cosine"),
     lambda x, y: ref.lifted_structure(x, y, 0.5, "cosine")),
    ("glifted", lambda: GeneralizedLiftedStructure(),
     lambda x, y: ref.generalized_lifted(x, y)),
    ("glifted_neg_margin", lambda: GeneralizedLiftedStructure(margin=-2.5),
     lambda x, y: ref.generalized_lifted(x, y, -2.5)),
    ("glifted_euc", lambda: GeneralizedLiftedStructure(0.5, metric="euclidean"),
     lambda x, y: ref.generalized_lifted(x, y, 0.5, "euclidean")),
    ("binomial", lambda: BinomialDeviance(), lambda x, y: ref.binomial(x, y)),
    ("binomial_soft", lambda: BinomialDeviance(alpha=1.0, beta=5.0, base=0.2),
     lambda x, y: ref.binomial(x, y, 1.0, 5.0, 0.2)),
    ("bin_lifted", lambda: BinLifted(), lambda x, y: ref.bin_lifted(x, y)),
    ("bin_lifted_soft", lambda: BinLifted(alpha=3.0, beta=10.0, base=0.1),
     lambda x, y: ref.bin_lifted(x, y, 3.0, 10.0, 0.1)),
    ("ms", lambda: MultiSimilarity(), lambda x, y: ref.multi_similarity(x, y)),
    ("ms_eps", lambda: MultiSimilarity(alpha=1.0, beta=20.0, base=0.3, epsilon=0.3),
     lambda x, y: ref.multi_similarity(x, y, 1.0, 20.0, 0.3, 0.3)),
    ("ms_no_mining", lambda: MultiSimilarity(mining=False),
     lambda x, y: ref.multi_similarity(x, y, mining=False)),
    ("raw", lambda: RelativeAbsoluteWeighting(), lambda x, y: ref.multi_similarity(x, y)),
]
IDS = [case[0] for case in CASES]
ONE_PER_CLASS = [case for case in CASES if case[0] in (
    "contrastive_cos", "contrastive_euc", "triplet_all", "triplet_semihard", "triplet_hard",
    "lifted", "glifted", "binomial", "bin_lifted", "ms")]


# -- values against the NumPy loops and weights against autodiff ------------------------------

@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
@pytest.mark.parametrize("batch", ["balanced", "uneven"])
def test_value_matches_numpy_reference(name, factory, reference, batch):
    labels, x = _batch(seed=2) if batch == "balanced" else _uneven(seed=3)
    if "euc" in name or name.startswith("lifted") and "cos" not in name:
        x = 0.6 * x  # distances of the order of the margins
    expected = reference(x.astype("float64"), labels)
    np.testing.assert_allclose(float(factory()(labels, x)), expected, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
def test_weights_are_the_exact_derivative(name, factory, reference):
    labels, x = _uneven(seed=4)
    autodiff, weights = autodiff_weights(factory(), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


def test_bin_lifted_weights_are_ms_supplementary_eq_10():
    labels, x = _batch(seed=5)
    expected = ref.bin_lifted_weights(x, labels) / len(labels)
    np.testing.assert_allclose(pair_weights(BinLifted(), labels, x), expected, rtol=1e-4,
                               atol=1e-7)


def test_binomial_weights_are_eq_13_14():
    labels, x = _batch(seed=6)
    s = ref.cosine(x)
    w = pair_weights(BinomialDeviance(), labels, x) * len(labels)
    for i in range(len(labels)):
        positives, negatives = ref.sets(labels, i)
        for j in positives:
            expected = 1 / (1 + np.exp(-2.0 * (0.5 - s[i, j]))) / len(positives)
            assert w[i, j] == pytest.approx(expected, rel=1e-4)
        for j in negatives:
            expected = 1 / (1 + np.exp(-50.0 * (s[i, j] - 0.5))) / len(negatives)
            assert w[i, j] == pytest.approx(expected, rel=1e-4, abs=1e-7)


def test_triplet_weights_count_active_triplets_eq_8():
    labels, x = _batch(seed=7)
    c = ref.cosine(x)
    kept = ref.triplets(x, labels, mining="all")
    expected = np.zeros_like(c)
    for a, p, n in kept:
        if c[a, n] - c[a, p] + 0.3 > 0:
            expected[a, p] += 1.0
            expected[a, n] += 1.0
    np.testing.assert_allclose(pair_weights(Triplet(0.3), labels, x) * len(kept), expected,
                               rtol=1e-4, atol=1e-6)


def test_generalized_lifted_weights_are_softmaxes_eq_10_11():
    labels, x = _batch(seed=8)
    s = ref.cosine(x)
    w = pair_weights(GeneralizedLiftedStructure(margin=1.0), labels, x) * len(labels)
    for i in range(len(labels)):
        positives, negatives = ref.sets(labels, i)
        for j in positives:
            expected = 1.0 / sum(np.exp(s[i, j] - s[i, k]) for k in positives)
            assert w[i, j] == pytest.approx(expected, rel=1e-4)
        for j in negatives:
            expected = 1.0 / sum(np.exp(s[i, k] - s[i, j]) for k in negatives)
            assert w[i, j] == pytest.approx(expected, rel=1e-4)


# -- mining inside the losses ---------------------------------------------------------------

def test_triplet_miner_and_mining_string_are_the_same_loss():
    labels, x = _batch(seed=9)
    for name, miner in mining.triplet.TRIPLET_MINERS.items():
        a = value_and_gradient(Triplet(mining=name), labels, x)
        b = value_and_gradient(Triplet(miner=miner()), labels, x)
        np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
        np.testing.assert_allclose(a[1], b[1], rtol=1e-6, atol=1e-8)


def test_triplet_on_pairs_kept_by_a_pair_miner():
    labels, x = _batch(seed=10)
    miner = mining.PairMarginMiner(pos_margin=0.5, neg_margin=0.0)
    value = float(Triplet(margin=0.3, miner=miner)(labels, x))
    c = ref.cosine(x)
    kept = [(a, p, n) for a, p, n in ref.triplets(x, labels)
            if c[a, p] < 0.5 and c[a, n] > 0.0]
    expected = sum(max(0.0, c[a, n] - c[a, p] + 0.3) for a, p, n in kept) / len(kept)
    assert value == pytest.approx(expected, rel=1e-5)


def test_contrastive_with_semihard_miner_uses_its_pair_masks():
    labels, x = _batch(seed=11)
    miner = mining.SemiHardMiner()
    c = ref.cosine(x)
    kept = ref.triplets(x, labels, mining="semihard")
    positives = {(a, p) for a, p, _ in kept}
    negatives = {(a, n) for a, _, n in kept}
    expected = (sum(1.0 - c[a, p] for a, p in positives)
                + sum(max(0.0, c[a, n] - 0.5) for a, n in negatives)) / len(labels)
    assert float(Contrastive(miner=miner)(labels, x)) == pytest.approx(expected, rel=1e-5)


def test_relative_absolute_weighting_is_multi_similarity():
    labels, x = _uneven(seed=12)
    raw, ms = RelativeAbsoluteWeighting(epsilon=0.2), MultiSimilarity(epsilon=0.2)
    assert isinstance(raw, MultiSimilarity) and raw.name == "relative_absolute_weighting"
    np.testing.assert_array_equal(pair_weights(raw, labels, x), pair_weights(ms, labels, x))
    assert float(raw(labels, x)) == float(ms(labels, x))


def test_multi_similarity_with_any_miner():
    labels, x = _batch(seed=13)
    loss = MultiSimilarity(miner=mining.HardMiner())
    s = ref.cosine(x)
    total = 0.0
    for a, p, n in ref.triplets(x, labels, mining="hard"):
        total += np.log1p(np.exp(-2.0 * (s[a, p] - 0.5))) / 2.0
        total += np.log1p(np.exp(50.0 * (s[a, n] - 0.5))) / 50.0
    assert float(loss(labels, x)) == pytest.approx(total / len(labels), rel=1e-5)


# -- execution modes, precision, degenerate batches ----------------------------------------

@pytest.mark.parametrize("name,factory,reference", ONE_PER_CLASS,
                         ids=[case[0] for case in ONE_PER_CLASS])
def test_eager_function_and_jit_agree(name, factory, reference):
    labels, x = _uneven(seed=14)
    loss = factory()
    eager = value_and_gradient(loss, labels, x)
    for mode in ("function", "jit"):
        value, grad = value_and_gradient(loss, labels, x, mode)
        np.testing.assert_allclose(value, eager[0], rtol=1e-5)
        np.testing.assert_allclose(grad, eager[1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name,factory,reference", ONE_PER_CLASS,
                         ids=[case[0] for case in ONE_PER_CLASS])
def test_mixed_float16_policy_matches_float32(name, factory, reference):
    labels, x = _batch(seed=15, dim=8)
    if "euc" in name or name == "lifted":
        x = 0.6 * x
    expected = float(factory()(labels, x))
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        loss = factory()
        value = loss(labels, tf.constant(x, tf.float16))
        assert value.dtype == tf.float32
        reference_half = float(factory()(labels, x.astype("float16").astype("float32")))
        np.testing.assert_allclose(float(value), reference_half, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(float(value), expected, rtol=1e-3, atol=1e-3)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _well_separated():
    """Three classes on orthogonal axes: positives coincide, negatives are orthogonal."""
    labels = np.array([0, 0, 1, 1, 2, 2], "int32")
    x = np.repeat(np.eye(3, dtype="float32"), 2, axis=0) * 3.0
    return labels, x


DEGENERATE = {
    "all_singletons": (np.arange(6, dtype="int32"), None),
    "one_class": (np.zeros(6, "int32"), None),
    "k1_two_samples": (np.array([0, 1], "int32"), None),
    "single_sample": (np.array([0], "int32"), None),
}


@pytest.mark.parametrize("name,factory,reference", ONE_PER_CLASS + [
    case for case in CASES if case[0] in ("triplet_easy", "triplet_miner_margin", "ms_no_mining")
], ids=[case[0] for case in ONE_PER_CLASS] + ["triplet_easy", "triplet_miner_margin",
                                              "ms_no_mining"])
@pytest.mark.parametrize("batch", list(DEGENERATE))
def test_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    labels, _ = DEGENERATE[batch]
    x = np.random.default_rng(16).normal(size=(len(labels), 4)).astype("float32")
    value, grad = value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    if not name.startswith(("bin", "contrastive", "ms_no")):  # these pull lone positives
        assert value == 0.0 and np.all(grad == 0.0)
    assert value == pytest.approx(reference(x.astype("float64"), labels), abs=1e-6)


@pytest.mark.parametrize("name,factory,reference", ONE_PER_CLASS,
                         ids=[case[0] for case in ONE_PER_CLASS])
def test_all_pairs_easy_batch_is_finite(name, factory, reference):
    labels, x = _well_separated()
    value, grad = value_and_gradient(factory(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))
    assert value == pytest.approx(reference(x.astype("float64"), labels), rel=1e-4, abs=1e-5)
    if name.startswith(("triplet", "contrastive_cos", "ms", "raw")):
        assert np.all(np.abs(grad) < 1e-6)  # every constraint satisfied: nothing to learn


def test_triplet_never_builds_a_cubic_tensor():
    labels, x = _batch(classes=8, per_class=4, dim=12)
    for mining_name in ("all", "semihard", "hard"):
        shapes = traced_tensor_shapes(Triplet(mining=mining_name), labels, x)
        sizes = [shape.num_elements() for shape in shapes if shape.is_fully_defined()]
        assert max(sizes) <= 2 * 32 * 32, mining_name  # at most the (N, N, 2) scatter indices


# -- arguments, serialization, models -------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: Triplet(metric="manhattan"), "metric"),
    (lambda: Triplet(distance="manhattan"), "metric"),
    (lambda: Triplet(mining="hardest"), "mining"),
    (lambda: Triplet(mining="hard", miner=mining.SemiHardMiner()), "not both"),
    (lambda: Contrastive(metric="dot"), "metric"),
    (lambda: LiftedStructure(metric="squared_euclidean"), "metric"),
    (lambda: GeneralizedLiftedStructure(metric="dot"), "metric"),
    (lambda: BinomialDeviance(alpha=0.0), "alpha"),
    (lambda: BinLifted(metric="euclidean"), "metric"),
    (lambda: Contrastive(miner="semihard"), "miner"),
    (lambda: Contrastive("euclidean", neg_margin=-1.0), "neg_margin"),
    (lambda: Contrastive(pos_margin=float("nan")), "pos_margin"),
    (lambda: Triplet(margin=float("inf")), "margin"),
    (lambda: LiftedStructure(margin=float("nan")), "margin"),
    (lambda: BinomialDeviance(beta=float("inf")), "beta"),
    (lambda: BinLifted(base=float("nan")), "base"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


def test_bad_inputs_raise_value_error():
    loss = Triplet()
    with pytest.raises(ValueError, match="batch size"):
        loss(np.zeros(5, "int32"), np.ones((4, 3), "float32"))
    with pytest.raises(ValueError, match="rank 2"):
        loss(np.zeros(4, "int32"), np.ones((4, 3, 1), "float32"))
    with pytest.raises(ValueError, match="NaN"):
        loss(np.zeros(2, "int32"), np.array([[np.nan, 1.0], [1.0, 0.0]], "float32"))


SERIALIZED = [
    Contrastive("euclidean", pos_margin=0.1, neg_margin=2.0, miner=mining.PairMarginMiner()),
    Triplet(margin=0.3, metric="squared_euclidean", mining="semihard"),
    Triplet(miner=mining.HardMiner(margin=0.2)),
    LiftedStructure(margin=2.0, metric="cosine"),
    GeneralizedLiftedStructure(margin=0.5, miner=mining.EasyMiner()),
    BinomialDeviance(alpha=1.0, beta=20.0, base=0.3),
    BinLifted(alpha=3.0),
    RelativeAbsoluteWeighting(epsilon=0.2),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    assert_config_round_trip(loss)  # from_config, keras.saving, keras_dml.losses.get by name
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is type(loss) and restored.get_config() == loss.get_config()
    registered = f"keras_dml>{type(loss).__name__}"
    assert keras.saving.get_registered_object(registered) is type(loss)
    labels, x = _batch(seed=17)
    assert float(restored(labels, x)) == pytest.approx(float(loss(labels, x)), rel=1e-6)


@pytest.mark.parametrize("loss", [Triplet(mining="hard"), LiftedStructure(),
                                  BinomialDeviance(), RelativeAbsoluteWeighting()],
                         ids=["triplet", "lifted", "binomial", "raw"])
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    labels, x = _batch(classes=6, per_class=4, dim=10, seed=18)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((10,))
    model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss=loss)
    history = model.fit(x, labels, batch_size=24, epochs=6, shuffle=False, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    after = model.evaluate(x, labels, batch_size=24, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.loss) is type(loss)
    assert loaded.loss.get_config() == loss.get_config()
    np.testing.assert_allclose(loaded.evaluate(x, labels, batch_size=24, verbose=0), after,
                               rtol=1e-5)
    string_model = DMLModel(inputs, keras.layers.Dense(8)(inputs))
    string_model.compile(optimizer="sgd", loss=f"keras_dml>{type(loss).__name__}")
    assert type(string_model.loss) is type(loss)


def test_losses_are_exported():
    for name in ("Contrastive", "Triplet", "LiftedStructure", "GeneralizedLiftedStructure",
                 "BinomialDeviance", "BinLifted", "RelativeAbsoluteWeighting"):
        assert hasattr(keras_dml.losses, name)


@pytest.mark.parametrize("mining_name", ["all", "semihard"])
def test_slot_and_sorting_paths_agree(mining_name, monkeypatch):
    """Few positives per anchor use per-slot passes, many use sorting: same loss."""
    labels, x = _uneven(seed=19)
    loss = Triplet(margin=0.3, mining=mining_name)
    slots_result = value_and_gradient(loss, labels, x)
    monkeypatch.setattr(mining.triplet, "SLOT_LIMIT", 0)
    sorting_result = value_and_gradient(loss, labels, x)
    np.testing.assert_allclose(sorting_result[0], slots_result[0], rtol=1e-5)
    np.testing.assert_allclose(sorting_result[1], slots_result[1], rtol=1e-4, atol=1e-6)
    expected = ref.triplet(x.astype("float64"), labels, 0.3, mining=mining_name)
    assert sorting_result[0] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("miner", [mining.SemiHardMiner(), mining.SemiHardMiner(0.2),
                                   mining.HardMiner(), mining.HardMiner(0.05),
                                   mining.EasyMiner(0.3)],
                         ids=["semihard", "semihard_margin", "hard", "hard_margin", "easy"])
def test_fast_paths_equal_the_generic_select_path(miner):
    """The fused per-miner paths give the loss of `select` + the generic triplet sum."""

    class Generic(type(miner)):  # same selection, no fast path
        pass

    labels, x = _uneven(seed=20)
    generic = Generic(miner.margin)
    fast = value_and_gradient(Triplet(margin=0.25, miner=miner), labels, x)
    slow = value_and_gradient(Triplet(margin=0.25, miner=generic), labels, x)
    np.testing.assert_allclose(fast[0], slow[0], rtol=1e-6)
    np.testing.assert_allclose(fast[1], slow[1], rtol=1e-5, atol=1e-7)
    autodiff, weights = autodiff_weights(Triplet(margin=0.25, miner=miner), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)
