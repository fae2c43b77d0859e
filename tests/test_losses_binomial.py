"""BinomialDeviance and BinLifted (keras_dml/losses/binomial.py): values against the
NumPy loops, exact weights and the papers' weight formulas, modes, precision,
degenerate batches, arguments, serialization and a trained DMLModel."""

import numpy as np
import pytest

from keras_dml.losses import BinLifted, BinomialDeviance
from keras_dml.weighting import autodiff_weights, pair_weights

import pair_loss_checks as pairs
import reference as ref
from pair_loss_checks import _batch, _uneven

# (id, loss factory, reference loop) -- several hyperparameter settings per loss.
CASES = [
    ("binomial", lambda: BinomialDeviance(), lambda x, y: ref.binomial(x, y)),
    ("binomial_soft", lambda: BinomialDeviance(alpha=1.0, beta=5.0, base=0.2),
     lambda x, y: ref.binomial(x, y, 1.0, 5.0, 0.2)),
    ("bin_lifted", lambda: BinLifted(), lambda x, y: ref.bin_lifted(x, y)),
    ("bin_lifted_soft", lambda: BinLifted(alpha=3.0, beta=10.0, base=0.1),
     lambda x, y: ref.bin_lifted(x, y, 3.0, 10.0, 0.1)),
]
IDS = [case[0] for case in CASES]
# The settings the execution-mode, precision and degenerate-batch checks run on.
MAIN_CASES = [case for case in CASES if case[0] in ("binomial", "bin_lifted")]
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
    (lambda: BinomialDeviance(alpha=0.0), "alpha"),
    (lambda: BinLifted(metric="euclidean"), "metric"),
    (lambda: BinomialDeviance(beta=float("inf")), "beta"),
    (lambda: BinLifted(base=float("nan")), "base"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()


SERIALIZED = [
    BinomialDeviance(alpha=1.0, beta=20.0, base=0.3),
    BinLifted(alpha=3.0),
]


@pytest.mark.parametrize("loss", SERIALIZED, ids=[type(l).__name__ for l in SERIALIZED])
def test_config_round_trip_and_lookup_by_name(loss):
    pairs.assert_config_round_trip_and_lookup_by_name(loss)


@pytest.mark.parametrize("loss", [BinomialDeviance()], ids=["binomial"])
def test_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path):
    pairs.assert_model_compiled_with_loss_trains_and_survives_save_load(loss, tmp_path)
