"""LiftedStructure and GeneralizedLiftedStructure (keras_dml/losses/lifted.py): the
generalised loss's weights (eq. 10-11) and the arguments. Their settings against the
NumPy loops, exact weights, modes, precision, degenerate batches, serialization and a
trained DMLModel: tests/test_losses_cases.py."""

import numpy as np
import pytest

from keras_dml.losses import GeneralizedLiftedStructure, LiftedStructure
from keras_dml.weighting import pair_weights

import reference as ref
from pair_loss_checks import _batch


# -- weights ------------------------------------------------------------------------------

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


# -- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: LiftedStructure(metric="squared_euclidean"), "metric"),
    (lambda: GeneralizedLiftedStructure(metric="dot"), "metric"),
    (lambda: LiftedStructure(margin=float("nan")), "margin"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()

