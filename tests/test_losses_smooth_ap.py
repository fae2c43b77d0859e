"""SmoothAP (keras_dml/losses/smooth_ap.py): the NumPy loop with exact weights,
pytorch-metric-learning 2.9 (and its C == k restriction), no cubic tensor, eager /
tf.function / XLA, mixed precision, degenerate batches, serialization and
hyperparameters."""

import pytest

import loss_checks as checks
import pair_family_checks as family
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import SmoothAP

CASES = {
    "SmoothAP": (lambda: SmoothAP(), lambda x, y: ref.smooth_ap(x, y)),
    "SmoothAP-paper": (lambda: SmoothAP(0.05, include_anchor=False),
                       lambda x, y: ref.smooth_ap(x, y, 0.05, False)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("labels", ["cxk", "unsorted"])
def test_matches_numpy_reference_with_exact_weights(name, labels):
    family.assert_matches_numpy_reference_with_exact_weights(*CASES[name], labels)


@pytest.mark.parametrize("cls", [SmoothAP])
@pytest.mark.parametrize("classes, k", [(4, 4), (8, 2)])
def test_equals_pytorch_metric_learning(cls, classes, k):
    family.assert_equals_pytorch_metric_learning(cls, classes, k)


def test_smooth_ap_gathers_positives_instead_of_a_cubic_tensor():
    """No (N, ., N) tensor in the forward + backward graph; XLA compiles the same graph
    (one loop over positive slots, no static-shape special case)."""
    labels, x = checks.batch(classes=32, k=2, dim=4, seed=0)
    n = len(labels)
    shapes = checks.traced_tensor_shapes(SmoothAP(), labels, x)
    assert not any(len(s) == 3 and s[1] == n and s[2] == n for s in shapes if s.rank)


# -- execution modes, precision, degenerate batches, serialization ---------------------

@pytest.mark.parametrize("make", [SmoothAP])
def test_eager_function_and_xla_agree(make):
    family.assert_eager_function_and_xla_agree(make)


@pytest.mark.parametrize("cls", [SmoothAP])
def test_mixed_float16_gives_float32(cls):
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.5)
    checks.assert_mixed_precision(cls, labels, x)


@pytest.mark.parametrize("cls", [SmoothAP])
def test_degenerate_batches_are_finite(cls):
    family.assert_degenerate_batches_are_finite(cls)


@pytest.mark.parametrize("loss", [SmoothAP(0.05, include_anchor=False)])
def test_config_and_save_load(loss, tmp_path):
    family.assert_config_and_save_load(loss, tmp_path)


@pytest.mark.parametrize("make, match", [
    (lambda: SmoothAP(0), "temperature"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
