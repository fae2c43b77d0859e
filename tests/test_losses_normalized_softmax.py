"""NormalizedSoftmax (keras_dml/losses/normalized_softmax.py): the NumPy loop, exact
weights and eager / tf.function / XLA (the ProxyLoss base: test_losses_proxies.py)."""

import pytest

import proxy_checks
from keras_dml.losses import NormalizedSoftmax
from proxy_checks import CLASSES

SETTINGS = [
    lambda: NormalizedSoftmax(CLASSES),
    lambda: NormalizedSoftmax(CLASSES, temperature=0.5),
]


@pytest.mark.parametrize("make", SETTINGS)
def test_matches_numpy_reference_and_autodiff(make):
    proxy_checks.assert_matches_numpy_reference_and_autodiff(make)


@pytest.mark.parametrize("cls", [NormalizedSoftmax])
def test_eager_function_and_xla_agree(cls):
    proxy_checks.assert_eager_function_and_xla_agree(cls)
