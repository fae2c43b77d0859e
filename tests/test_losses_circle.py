"""Circle (keras_dml/losses/circle.py): the NumPy loop with exact weights,
pytorch-metric-learning 2.9, keras.losses.Circle, eager / tf.function / XLA, mixed
precision, degenerate batches, serialization and hyperparameters."""

import keras
import numpy as np
import pytest

import loss_checks as checks
import pair_family_checks as family
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import Circle

CASES = {
    "Circle": (lambda: Circle(), lambda x, y: ref.circle(x, y)),
    "Circle-face": (lambda: Circle(margin=0.25, gamma=256.0),
                    lambda x, y: ref.circle(x, y, 0.25, 256.0)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("labels", ["cxk", "unsorted"])
def test_matches_numpy_reference_with_exact_weights(name, labels):
    family.assert_matches_numpy_reference_with_exact_weights(*CASES[name], labels)


@pytest.mark.parametrize("cls", [Circle])
@pytest.mark.parametrize("classes, k", [(4, 4), (8, 2)])
def test_equals_pytorch_metric_learning(cls, classes, k):
    family.assert_equals_pytorch_metric_learning(cls, classes, k)


def test_circle_value_equals_keras_circle_on_normalised_embeddings():
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=9)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    for margin, gamma in [(0.4, 80.0), (0.25, 256.0)]:
        theirs = keras.losses.Circle(gamma=gamma, margin=margin)
        np.testing.assert_allclose(float(Circle(margin, gamma)(labels, unit)),
                                   float(theirs(labels, unit)), rtol=1e-5)


# -- execution modes, precision, degenerate batches, serialization ---------------------

@pytest.mark.parametrize("make", [Circle])
def test_eager_function_and_xla_agree(make):
    family.assert_eager_function_and_xla_agree(make)


@pytest.mark.parametrize("cls", [Circle])
def test_mixed_float16_gives_float32(cls):
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.5)
    checks.assert_mixed_precision(cls, labels, x)


@pytest.mark.parametrize("cls", [Circle])
def test_degenerate_batches_are_finite(cls):
    family.assert_degenerate_batches_are_finite(cls)


@pytest.mark.parametrize("loss", [Circle(margin=0.25, gamma=128.0)])
def test_config_and_save_load(loss, tmp_path):
    family.assert_config_and_save_load(loss, tmp_path)


@pytest.mark.parametrize("make, match", [
    (lambda: Circle(gamma=0), "gamma"), (lambda: Circle(margin=float("nan")), "margin"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
