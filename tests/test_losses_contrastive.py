"""Contrastive (keras_dml/losses/contrastive.py): values against the NumPy loop, exact
weights, a triplet miner's pair masks, modes, precision, degenerate batches, arguments
and serialization."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import Contrastive
from keras_dml.weighting import autodiff_weights

import pair_loss_checks as pairs
import reference as ref
from pair_loss_checks import _batch, _uneven

# (id, loss factory, reference loop) -- several hyperparameter settings.
CASES = [
    ("contrastive_cos", lambda: Contrastive(), lambda x, y: ref.contrastive(x, y)),
    ("contrastive_cos_m", lambda: Contrastive(pos_margin=0.8, neg_margin=0.1),
     lambda x, y: ref.contrastive(x, y, "cosine", 0.8, 0.1)),
    ("contrastive_euc", lambda: Contrastive("euclidean", neg_margin=2.5),
     lambda x, y: ref.contrastive(x, y, "euclidean", 0.0, 2.5)),
    ("contrastive_euc_m", lambda: Contrastive("euclidean", pos_margin=1.0, neg_margin=3.0),
     lambda x, y: ref.contrastive(x, y, "euclidean", 1.0, 3.0)),
]
IDS = [case[0] for case in CASES]
# The settings the execution-mode, precision and degenerate-batch checks run on.
MAIN_CASES = [case for case in CASES if case[0] in ("contrastive_cos", "contrastive_euc")]
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


# -- mining ---------------------------------------------------------------------------------

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


# -- execution modes, precision, degenerate batches ----------------------------------------

@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_eager_function_and_jit_agree(name, factory, reference):
    pairs.assert_eager_function_and_jit_agree(factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_mixed_float16_policy_matches_float32(name, factory, reference):
    pairs.assert_mixed_float16_policy_matches_float32(name, factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
@pytest.mark.parametrize("batch", list(pairs.DEGENERATE))
def test_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    pairs.assert_degenerate_batches_are_finite_and_zero(name, factory, reference, batch)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_all_pairs_easy_batch_is_finite(name, factory, reference):
    pairs.assert_all_pairs_easy_batch_is_finite(name, factory, reference)


# -- arguments, serialization ---------------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: Contrastive(metric="dot"), "metric"),
    (lambda: Contrastive(miner="semihard"), "miner"),
    (lambda: Contrastive("euclidean", neg_margin=-1.0), "neg_margin"),
    (lambda: Contrastive(pos_margin=float("nan")), "pos_margin"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


SERIALIZED = [
    Contrastive("euclidean", pos_margin=0.1, neg_margin=2.0, miner=mining.PairMarginMiner()),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    pairs.assert_config_round_trip_and_lookup_by_name(loss)
