"""Checks shared by the test files of Circle (test_losses_circle), SupervisedContrastive
and NTXent (test_losses_supervised_contrastive), SmoothAP (test_losses_smooth_ap) and
MultipleNegativesRanking (test_losses_multiple_negatives): the NumPy loops of
tests/reference_margin_softmax_and_pair_family.py with exact weights,
pytorch-metric-learning 2.9, eager / tf.function / XLA, degenerate batches,
serialization and save/load."""

import numpy as np

import loss_checks as checks
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import MultipleNegativesRanking, SmoothAP, SupervisedContrastive

UNSORTED = np.array([3, 1, 3, 2, 1, 1, 0, 2, 5, 0], "int32")  # unequal counts, a singleton


def assert_matches_numpy_reference_with_exact_weights(make, reference, labels):
    if labels == "cxk":
        labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    else:
        labels = UNSORTED
        x = np.random.default_rng(5).normal(size=(len(labels), 6)).astype("float32")
    loss = make()
    np.testing.assert_allclose(float(loss(labels, x)), reference(x, labels), rtol=1e-5,
                               atol=1e-6)
    checks.assert_exact_weights(loss, labels, x, atol=1e-5)


def _pml_value_and_gradient(loss, labels, x):
    import torch

    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    value = loss(xt, torch.tensor(labels, dtype=torch.long))
    value.backward()
    return float(value), xt.grad.numpy()


def _pml(name):
    from pytorch_metric_learning import losses as pml

    return {"Circle": pml.CircleLoss(), "SupervisedContrastive": pml.SupConLoss(),
            "NTXent": pml.NTXentLoss(), "SmoothAP": pml.SmoothAPLoss()}[name]


def assert_equals_pytorch_metric_learning(cls, classes, k):
    # Sorted C x k labels: the batches PML's SmoothAPLoss accepts; every anchor has a
    # positive and a negative, where PML's averages agree with the mean over anchors.
    labels, x = checks.batch(classes=classes, k=k, dim=16, seed=classes)
    ours = labels
    if cls is SmoothAP and classes != k:
        # PML 2.9's SmoothAPLoss reshapes the batch into blocks of C rows, not k
        # (num_classes_batch = batch_size // num_unique_labels is k): it is right only
        # for C == k, and otherwise equals the true Smooth-AP of k classes x C samples.
        ours = np.repeat(np.arange(k), classes).astype("int32")
        assert abs(ref.smooth_ap(x, labels) - ref.smooth_ap(x, ours)) > 1e-3
    value, gradient = checks.value_and_gradient(cls(), ours, x)
    expected, expected_gradient = _pml_value_and_gradient(_pml(cls.__name__), labels, x)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    scale = np.abs(expected_gradient).max()
    np.testing.assert_allclose(gradient / scale, expected_gradient / scale, rtol=1e-5, atol=1e-5)


def assert_eager_function_and_xla_agree(make):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=4)
    if make is SmoothAP:  # unsorted, uneven classes: the loop over positive slots
        labels = UNSORTED
        x = np.random.default_rng(1).normal(size=(len(labels), 6)).astype("float32")
    checks.assert_modes_agree(make(), labels, x)


def assert_degenerate_batches_are_finite(cls):
    # SupCon keeps the paper's value without negatives (A(i) = P(i)), and SmoothAP's
    # AP of an all-positive ranking is 1 up to rounding in its gradient: finite, not 0.
    zero = {SupervisedContrastive: ("single_sample",),
            SmoothAP: ("single_sample",)}.get(cls, ("one_class", "single_sample"))
    rng = np.random.default_rng(3)
    for name, labels in checks.DEGENERATE_BATCHES.items():
        x = rng.normal(size=(len(labels), 8)).astype("float32")
        value, gradient = checks.value_and_gradient(cls(), labels.astype("int32"), x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient)), name
        if name in zero:
            assert value == 0.0 and not np.any(gradient), (name, value)


def assert_config_and_save_load(loss, tmp_path):
    checks.assert_config_round_trip(loss)
    if not isinstance(loss, MultipleNegativesRanking):
        checks.assert_save_load(loss, tmp_path)
