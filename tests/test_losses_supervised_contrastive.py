"""SupervisedContrastive and NTXent (keras_dml/losses/supervised_contrastive.py): the
hyperparameters. Their settings against the NumPy loops with exact weights,
pytorch-metric-learning 2.9, precision, degenerate batches and serialization:
tests/test_losses_cases.py."""

import pytest

from keras_dml.losses import NTXent, SupervisedContrastive


@pytest.mark.parametrize("make, match", [
    (lambda: SupervisedContrastive(-1), "temperature"), (lambda: NTXent(0), "temperature"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
