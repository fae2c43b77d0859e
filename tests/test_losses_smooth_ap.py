"""SmoothAP (keras_dml/losses/smooth_ap.py): no cubic tensor and the hyperparameters. Its
settings against the NumPy loop with exact weights, pytorch-metric-learning 2.9 (and
its C == k restriction), eager / tf.function / XLA, precision, degenerate batches and
serialization: tests/test_losses_cases.py."""

import pytest

import loss_checks as checks
from keras_dml.losses import SmoothAP


def test_smooth_ap_gathers_positives_instead_of_a_cubic_tensor():
    """No (N, ., N) tensor in the forward + backward graph; XLA compiles the same graph
    (one loop over positive slots, no static-shape special case)."""
    labels, x = checks.batch(classes=32, k=2, dim=4, seed=0)
    n = len(labels)
    shapes = checks.traced_tensor_shapes(SmoothAP(), labels, x)
    assert not any(len(s) == 3 and s[1] == n and s[2] == n for s in shapes if s.rank)


@pytest.mark.parametrize("make, match", [
    (lambda: SmoothAP(0), "temperature"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
