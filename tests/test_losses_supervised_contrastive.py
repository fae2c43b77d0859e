"""SupervisedContrastive and NTXent (keras_dml/losses/supervised_contrastive.py): the
NumPy loops with exact weights, pytorch-metric-learning 2.9, eager / tf.function /
XLA, mixed precision, degenerate batches, serialization and hyperparameters."""

import pytest

import loss_checks as checks
import pair_family_checks as family
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import NTXent, SupervisedContrastive

CASES = {
    "SupCon": (lambda: SupervisedContrastive(), lambda x, y: ref.supcon(x, y)),
    "SupCon-0.5": (lambda: SupervisedContrastive(0.5), lambda x, y: ref.supcon(x, y, 0.5)),
    "NTXent": (lambda: NTXent(), lambda x, y: ref.ntxent(x, y)),
    "NTXent-0.2": (lambda: NTXent(0.2), lambda x, y: ref.ntxent(x, y, 0.2)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("labels", ["cxk", "unsorted"])
def test_matches_numpy_reference_with_exact_weights(name, labels):
    family.assert_matches_numpy_reference_with_exact_weights(*CASES[name], labels)


@pytest.mark.parametrize("cls", [SupervisedContrastive, NTXent])
@pytest.mark.parametrize("classes, k", [(4, 4), (8, 2)])
def test_equals_pytorch_metric_learning(cls, classes, k):
    family.assert_equals_pytorch_metric_learning(cls, classes, k)


# -- execution modes, precision, degenerate batches, serialization ---------------------

@pytest.mark.parametrize("make", [SupervisedContrastive, NTXent])
def test_eager_function_and_xla_agree(make):
    family.assert_eager_function_and_xla_agree(make)


@pytest.mark.parametrize("cls", [SupervisedContrastive, NTXent])
def test_mixed_float16_gives_float32(cls):
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.5)
    checks.assert_mixed_precision(cls, labels, x)


@pytest.mark.parametrize("cls", [SupervisedContrastive, NTXent])
def test_degenerate_batches_are_finite(cls):
    family.assert_degenerate_batches_are_finite(cls)


@pytest.mark.parametrize("loss", [SupervisedContrastive(0.2), NTXent(0.5)])
def test_config_and_save_load(loss, tmp_path):
    family.assert_config_and_save_load(loss, tmp_path)


@pytest.mark.parametrize("make, match", [
    (lambda: SupervisedContrastive(-1), "temperature"), (lambda: NTXent(0), "temperature"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
