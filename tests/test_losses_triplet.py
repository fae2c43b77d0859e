"""Triplet (keras_dml/losses/triplet.py): eq. 8's weights, its miners and fused paths, no
cubic tensor, arguments and inputs. Its settings against the NumPy loop, exact weights,
modes, precision, degenerate batches, serialization and a trained DMLModel:
tests/test_losses_cases.py."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import Triplet
from keras_dml.weighting import autodiff_weights, pair_weights

import reference as ref
from loss_checks import traced_tensor_shapes, value_and_gradient
from pair_loss_checks import _batch, _uneven


# -- weights ------------------------------------------------------------------------------

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

def _miner(name):
    """The miner that the deprecated `Triplet(mining=name)` stands for (None: all triplets)."""
    return None if name == "all" else mining.triplet.TRIPLET_MINERS[name]()


def test_triplet_miner_and_mining_string_are_the_same_loss():
    labels, x = _batch(seed=9)
    for name, miner in mining.triplet.TRIPLET_MINERS.items():
        with pytest.deprecated_call(match=f"pass miner={miner.__name__}"):
            deprecated = Triplet(mining=name)
        a = value_and_gradient(deprecated, labels, x)
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


def test_triplet_never_builds_a_cubic_tensor():
    labels, x = _batch(classes=8, per_class=4, dim=12)
    for mining_name in ("all", "semihard", "hard"):
        shapes = traced_tensor_shapes(Triplet(miner=_miner(mining_name)), labels, x)
        sizes = [shape.num_elements() for shape in shapes if shape.is_fully_defined()]
        assert max(sizes) <= 2 * 32 * 32, mining_name  # at most the (N, N, 2) scatter indices


# -- arguments and inputs -------------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: Triplet(metric="manhattan"), "metric"),
    (lambda: Triplet(distance="manhattan"), "metric"),
    (lambda: Triplet(mining="hardest"), "mining"),
    (lambda: Triplet(mining="hard", miner=mining.SemiHardMiner()), "not both"),
    (lambda: Triplet(margin=float("inf")), "margin"),
])
@pytest.mark.filterwarnings("ignore:.*deprecated:DeprecationWarning")  # distance=, mining=
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


# -- the fused paths equal the generic one ---------------------------------------------------

@pytest.mark.parametrize("mining_name", ["all", "semihard"])
def test_slot_and_sorting_paths_agree(mining_name, monkeypatch):
    """Few positives per anchor use per-slot passes, many use sorting: same loss."""
    labels, x = _uneven(seed=19)
    loss = Triplet(margin=0.3, miner=_miner(mining_name))
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
