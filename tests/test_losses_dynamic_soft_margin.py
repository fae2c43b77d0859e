"""DynamicSoftMargin (keras_dml/losses/dynamic_soft_margin.py): its running histogram
and values against the NumPy loop over a sequence of batches, eager, in tf.function and
under XLA; exact weights with the histogram held; the histogram saved with the model;
pytorch-metric-learning 2.9's DynamicSoftMarginLoss (values call after call, and its
gradient with the histogram detached). Config, precision and degenerate batches:
tests/test_losses_contract.py; JAX and PyTorch training: test_backend_stateful_losses.py."""

import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import pml_twin_checks as twin
import reference_pml_twins as twins_ref
from keras_dml.losses import DynamicSoftMargin


def _batches(count=3, seed=0):
    """C x k batches, then one of uneven classes with a singleton."""
    batches = [checks.batch(classes=4, k=3, dim=6, seed=seed + i) for i in range(count - 1)]
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3], "int32")
    x = np.random.default_rng(seed + 9).normal(size=(len(labels), 6)).astype("float32")
    return batches + [(labels, x)]


def _step(loss, mode):
    def call(labels, x):
        return loss(labels, x)

    return call if mode == "eager" else tf.function(call, jit_compile=mode == "jit")


OTHER = {"min_val": -1.0, "num_bins": 7, "momentum": 0.3}


@pytest.mark.parametrize("mode, settings", [
    ("eager", {}), ("eager", OTHER), ("jit", {}),
    pytest.param("function", OTHER, marks=pytest.mark.slow),  # a trace per batch shape
    pytest.param("jit", OTHER, marks=pytest.mark.slow),
])
def test_values_and_histogram_follow_the_loop_batch_after_batch(mode, settings):
    loss = DynamicSoftMargin(**settings)
    step = _step(loss, mode)
    histogram = None
    for labels, x in _batches():
        expected, histogram = twins_ref.dynamic_soft_margin_loop(x, labels, histogram,
                                                                 **settings)
        np.testing.assert_allclose(float(step(tf.constant(labels), tf.constant(x))), expected,
                                   rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(loss.histogram.numpy(), histogram, rtol=1e-5, atol=1e-7)
    assert np.count_nonzero(histogram) > 2


def test_weights_are_the_cdf_of_each_triplet_with_the_histogram_held():
    loss = DynamicSoftMargin(momentum=0.5)
    for labels, x in _batches(2):
        loss(labels, x)
    labels, x = _batches(3)[-1]
    checks.assert_exact_weights(loss, labels, x)


def test_a_batch_without_triplets_gives_zero_and_keeps_the_histogram():
    loss = DynamicSoftMargin()
    labels, x = _batches(1)[0]
    loss(labels, x)
    before = loss.histogram.numpy().copy()
    value, gradient = checks.value_and_gradient(loss, np.zeros(5, "int32"), x[:5])
    assert value == 0.0 and not np.any(gradient)
    np.testing.assert_array_equal(loss.histogram.numpy(), before)


def test_the_histogram_is_saved_and_restored_with_the_model(tmp_path):
    model, loaded = checks.assert_save_load(DynamicSoftMargin(momentum=0.2), tmp_path)
    saved = loaded.dml_loss.histogram.numpy()
    assert np.count_nonzero(saved) > 2
    np.testing.assert_allclose(saved, model.dml_loss.histogram.numpy(), rtol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda: DynamicSoftMargin(min_val=0.5), "min_val"),
    (lambda: DynamicSoftMargin(num_bins=0), "num_bins"),
    (lambda: DynamicSoftMargin(momentum=1.5), "momentum"),
    (lambda: DynamicSoftMargin(momentum=0), "momentum"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@twin.against_pml
def test_equals_pytorch_metric_learning_call_after_call(classes, k, normalised):
    """PML's only distance here is LpDistance of normalised embeddings. Its gradient
    also runs through the histogram it has just updated (not the paper's weighting,
    and a second `backward` then fails): with the histogram detached it is this
    loss's, the paper's CDF weights."""
    from pytorch_metric_learning import losses as pml

    class Detached(pml.DynamicSoftMarginLoss):
        def update_histogram(self, data):
            super().update_histogram(data.detach())

    loss, peer = DynamicSoftMargin(), Detached()
    for seed in range(3):
        labels, x = twin.compared_batch(classes, k, normalised, seed=seed)
        if seed == 0:
            _, through_histogram = twin.pml_value_and_gradient(
                pml.DynamicSoftMarginLoss(), labels, x)
        _, gradient = twin.assert_equals_pml(loss, peer, labels, x)
        np.testing.assert_allclose(loss.histogram.numpy()[:-1], peer.hist_.numpy(),
                                   rtol=1e-5, atol=1e-7)
        if seed == 0:  # measured 15-29% of the gradient's scale on these batches
            scale = np.abs(gradient).max()
            assert np.abs(through_histogram - gradient).max() > 0.05 * scale
