"""Circle (keras_dml/losses/circle.py): keras.losses.Circle and the hyperparameters. Its
settings against the NumPy loop with exact weights, pytorch-metric-learning 2.9,
precision, degenerate batches and serialization: tests/test_losses_cases.py."""

import keras
import numpy as np
import pytest

import loss_checks as checks
from keras_dml.losses import Circle


def test_circle_value_equals_keras_circle_on_normalised_embeddings():
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=9)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    for margin, gamma in [(0.4, 80.0), (0.25, 256.0)]:
        theirs = keras.losses.Circle(gamma=gamma, margin=margin)
        np.testing.assert_allclose(float(Circle(margin, gamma)(labels, unit)),
                                   float(theirs(labels, unit)), rtol=1e-5)


@pytest.mark.parametrize("make, match", [
    (lambda: Circle(gamma=0), "gamma"), (lambda: Circle(margin=float("nan")), "margin"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
