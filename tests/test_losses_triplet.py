"""Triplet (keras_dml/losses/triplet.py): values against the NumPy loop, exact weights,
its miners and fused paths, modes, precision, degenerate batches, no cubic tensor,
arguments, inputs, serialization and a trained DMLModel."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import Triplet
from keras_dml.weighting import autodiff_weights, pair_weights

import pair_loss_checks as pairs
import reference as ref
from loss_checks import traced_tensor_shapes, value_and_gradient
from pair_loss_checks import _batch, _uneven

# (id, loss factory, reference loop) -- several hyperparameter settings.
CASES = [
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
]
IDS = [case[0] for case in CASES]
# The settings the execution-mode, precision and degenerate-batch checks run on.
MAIN_CASES = [case for case in CASES if case[0] in (
    "triplet_all", "triplet_semihard", "triplet_hard")]
MAIN_IDS = [case[0] for case in MAIN_CASES]


# -- values against the NumPy loop and weights against autodiff -------------------------------

@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
@pytest.mark.parametrize("batch", ["balanced", "uneven"])
def test_value_matches_numpy_reference(name, factory, reference, batch):
    pairs.assert_value_matches_numpy_reference(name, factory, reference, batch)


@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
def test_weights_are_the_exact_derivative(name, factory, reference):
    labels, x = _uneven(seed=4)
    autodiff, weights = autodiff_weights(factory(), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


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


# -- mining inside the loss -----------------------------------------------------------------

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


# -- execution modes, precision, degenerate batches ----------------------------------------

@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_eager_function_and_jit_agree(name, factory, reference):
    pairs.assert_eager_function_and_jit_agree(factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_mixed_float16_policy_matches_float32(name, factory, reference):
    pairs.assert_mixed_float16_policy_matches_float32(name, factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES + [
    case for case in CASES if case[0] in ("triplet_easy", "triplet_miner_margin")
], ids=MAIN_IDS + ["triplet_easy", "triplet_miner_margin"])
@pytest.mark.parametrize("batch", list(pairs.DEGENERATE))
def test_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    pairs.assert_degenerate_batches_are_finite_and_zero(name, factory, reference, batch)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_all_pairs_easy_batch_is_finite(name, factory, reference):
    pairs.assert_all_pairs_easy_batch_is_finite(name, factory, reference)


def test_triplet_never_builds_a_cubic_tensor():
    labels, x = _batch(classes=8, per_class=4, dim=12)
    for mining_name in ("all", "semihard", "hard"):
        shapes = traced_tensor_shapes(Triplet(mining=mining_name), labels, x)
        sizes = [shape.num_elements() for shape in shapes if shape.is_fully_defined()]
        assert max(sizes) <= 2 * 32 * 32, mining_name  # at most the (N, N, 2) scatter indices


# -- arguments, inputs, serialization, models -----------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: Triplet(metric="manhattan"), "metric"),
    (lambda: Triplet(distance="manhattan"), "metric"),
    (lambda: Triplet(mining="hardest"), "mining"),
    (lambda: Triplet(mining="hard", miner=mining.SemiHardMiner()), "not both"),
    (lambda: Triplet(margin=float("inf")), "margin"),
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
    Triplet(margin=0.3, metric="squared_euclidean", mining="semihard"),
    Triplet(miner=mining.HardMiner(margin=0.2)),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    pairs.assert_config_round_trip_and_lookup_by_name(loss)


@pytest.mark.parametrize("loss", [Triplet(mining="hard")], ids=["triplet"])
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    pairs.assert_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path)


# -- the fused paths equal the generic one ---------------------------------------------------

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
