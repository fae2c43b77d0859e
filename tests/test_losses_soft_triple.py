"""SoftTriple (keras_dml/losses/soft_triple.py): the NumPy loop, exact weights and
eager / tf.function / XLA (the ProxyLoss base: test_losses_proxies.py)."""

import pytest

import proxy_checks
from keras_dml.losses import SoftTriple
from proxy_checks import CLASSES

SETTINGS = [
    lambda: SoftTriple(CLASSES),
    lambda: SoftTriple(CLASSES, centers_per_class=3, la=10.0, gamma=0.5, tau=0.5, margin=0.1),
    lambda: SoftTriple(CLASSES, centers_per_class=1, tau=0.2),
]


@pytest.mark.parametrize("make", SETTINGS)
def test_matches_numpy_reference_and_autodiff(make):
    proxy_checks.assert_matches_numpy_reference_and_autodiff(make)


@pytest.mark.parametrize("cls", [SoftTriple])
def test_eager_function_and_xla_agree(cls):
    proxy_checks.assert_eager_function_and_xla_agree(cls)
