"""MultiSimilarity and RelativeAbsoluteWeighting (keras_dml/losses/multi_similarity.py):
values against the NumPy loop, exact weights, any miner, modes, precision, degenerate
batches, serialization and a trained DMLModel."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import MultiSimilarity, RelativeAbsoluteWeighting
from keras_dml.weighting import autodiff_weights, pair_weights

import pair_loss_checks as pairs
import reference as ref
from pair_loss_checks import _batch, _uneven

# (id, loss factory, reference loop) -- several hyperparameter settings per loss.
CASES = [
    ("ms", lambda: MultiSimilarity(), lambda x, y: ref.multi_similarity(x, y)),
    ("ms_eps", lambda: MultiSimilarity(alpha=1.0, beta=20.0, base=0.3, epsilon=0.3),
     lambda x, y: ref.multi_similarity(x, y, 1.0, 20.0, 0.3, 0.3)),
    ("ms_no_mining", lambda: MultiSimilarity(mining=False),
     lambda x, y: ref.multi_similarity(x, y, mining=False)),
    ("raw", lambda: RelativeAbsoluteWeighting(), lambda x, y: ref.multi_similarity(x, y)),
]
IDS = [case[0] for case in CASES]
# The settings the execution-mode, precision and degenerate-batch checks run on.
MAIN_CASES = [case for case in CASES if case[0] in ("ms",)]
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


# -- RAW and mining -------------------------------------------------------------------------

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

@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_eager_function_and_jit_agree(name, factory, reference):
    pairs.assert_eager_function_and_jit_agree(factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_mixed_float16_policy_matches_float32(name, factory, reference):
    pairs.assert_mixed_float16_policy_matches_float32(name, factory)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES + [
    case for case in CASES if case[0] in ("ms_no_mining",)
], ids=MAIN_IDS + ["ms_no_mining"])
@pytest.mark.parametrize("batch", list(pairs.DEGENERATE))
def test_degenerate_batches_are_finite_and_zero(name, factory, reference, batch):
    pairs.assert_degenerate_batches_are_finite_and_zero(name, factory, reference, batch)


@pytest.mark.parametrize("name,factory,reference", MAIN_CASES, ids=MAIN_IDS)
def test_all_pairs_easy_batch_is_finite(name, factory, reference):
    pairs.assert_all_pairs_easy_batch_is_finite(name, factory, reference)


# -- serialization, models ------------------------------------------------------------------

SERIALIZED = [
    RelativeAbsoluteWeighting(epsilon=0.2),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    pairs.assert_config_round_trip_and_lookup_by_name(loss)


@pytest.mark.parametrize("loss", [RelativeAbsoluteWeighting()], ids=["raw"])
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    pairs.assert_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path)
