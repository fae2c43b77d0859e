"""LiftedStructure and GeneralizedLiftedStructure (keras_dml/losses/lifted.py): values
against the NumPy loops, exact weights, modes, precision, degenerate batches,
arguments, serialization and a trained DMLModel."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import GeneralizedLiftedStructure, LiftedStructure
from keras_dml.weighting import autodiff_weights, pair_weights

import pair_loss_checks as pairs
import reference as ref
from pair_loss_checks import _batch, _uneven

# (id, loss factory, reference loop) -- several hyperparameter settings per loss.
CASES = [
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
]
IDS = [case[0] for case in CASES]
# The settings the execution-mode, precision and degenerate-batch checks run on.
MAIN_CASES = [case for case in CASES if case[0] in ("lifted", "glifted")]
MAIN_IDS = [case[0] for case in MAIN_CASES]


# -- values against the NumPy loops and weights against autodiff ------------------------------

@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
@pytest.mark.parametrize("batch", ["balanced", "uneven"])
def test_value_matches_numpy_reference(name, factory, reference, batch):
    pairs.assert_value_matches_numpy_reference(name, factory, reference, batch)


@pytest.mark.parametrize("name,factory,reference", CASES, ids=IDS)
def test_weights_are_the_exact_derivative(name, factory, reference):
    labels, x = _uneven(seed=4)
    autodiff, weights = autodiff_weights(factory(), labels, x)
    np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


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


# -- arguments, serialization, models -------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: LiftedStructure(metric="squared_euclidean"), "metric"),
    (lambda: GeneralizedLiftedStructure(metric="dot"), "metric"),
    (lambda: LiftedStructure(margin=float("nan")), "margin"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


SERIALIZED = [
    LiftedStructure(margin=2.0, metric="cosine"),
    GeneralizedLiftedStructure(margin=0.5, miner=mining.EasyMiner()),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    pairs.assert_config_round_trip_and_lookup_by_name(loss)


@pytest.mark.parametrize("loss", [LiftedStructure()], ids=["lifted"])
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    pairs.assert_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path)
