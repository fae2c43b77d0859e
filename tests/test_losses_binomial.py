"""BinomialDeviance and BinLifted (keras_dml/losses/binomial.py): the papers' weight
formulas and the arguments. Their settings against the NumPy loops, exact weights,
modes, precision, degenerate batches, serialization and a trained DMLModel:
tests/test_losses_cases.py."""

import numpy as np
import pytest

from keras_dml.losses import BinLifted, BinomialDeviance
from keras_dml.weighting import pair_weights

import reference as ref
from pair_loss_checks import _batch


# -- weights ------------------------------------------------------------------------------

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


# -- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: BinomialDeviance(alpha=0.0), "alpha"),
    (lambda: BinLifted(metric="euclidean"), "metric"),
    (lambda: BinomialDeviance(beta=float("inf")), "beta"),
    (lambda: BinLifted(base=float("nan")), "base"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()

