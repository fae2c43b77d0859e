"""PNP (keras_dml/losses/pnp.py): the paper's five variants as a NumPy loop, exact
weights, an explicit reference set, and pytorch-metric-learning 2.9's PNPLoss. Modes,
precision, serialization and degenerate batches: tests/test_losses_contract.py."""

import numpy as np
import pytest

import loss_checks as checks
import pml_twin_checks as twin
import reference as ref
import reference_pml_twins as twins_ref
from keras_dml.losses import PNP, Reference
from keras_dml.losses.pnp import VARIANTS

@pytest.mark.parametrize("variant", VARIANTS)
def test_each_variant_is_the_papers_and_weights_are_exact(variant):
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3], "int32")  # 3: a singleton
    x = np.random.default_rng(6).normal(size=(len(labels), 6)).astype("float32")
    settings = {"variant": variant, "b": 3.0, "alpha": 2.0, "anneal": 0.1}
    loss = PNP(**settings)
    np.testing.assert_allclose(float(loss(labels, x)), twins_ref.pnp_loop(x, labels, **settings),
                               rtol=1e-5, atol=1e-7)
    checks.assert_exact_weights(loss, labels, x)


def test_defaults_follow_the_loop():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=2)
    np.testing.assert_allclose(float(PNP()(labels, x)), twins_ref.pnp_loop(x, labels), rtol=1e-5)


def test_only_negatives_before_a_positive_are_penalised():
    """A negative ranked far after every positive moves nothing: its weight is 0."""
    labels, x = checks.batch(classes=2, k=3, dim=4, seed=1)
    x[3:] = -x[0]  # class 1 opposite class 0's first sample
    weights = PNP().terms(labels, x).weights.numpy()
    s = ref.cosine(x)
    far = (labels[:, None] != labels[None, :]) & (s < s[np.arange(6), np.arange(6)][:, None]
                                                   - 1.0)
    assert far.any() and np.all(np.abs(weights[far]) < 1e-6)


def test_an_explicit_reference_set_is_the_batch_form():
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=4)
    loss = PNP(variant="Dq", anneal=0.1)
    memory = Reference(labels, x, own=np.arange(len(x)))
    np.testing.assert_allclose(float(loss(labels, x, reference=memory)),
                               float(loss(labels, x)), rtol=1e-6)


@pytest.mark.parametrize("make, match", [
    (lambda: PNP(variant="D"), "variant"), (lambda: PNP(anneal=0), "anneal"),
    (lambda: PNP(b=-1), "b"), (lambda: PNP(alpha=float("inf")), "alpha"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()


@twin.against_pml
@pytest.mark.parametrize("variant", VARIANTS)
def test_equals_pytorch_metric_learning(classes, k, normalised, variant):
    """PML's only distance for PNPLoss is the cosine similarity."""
    from pytorch_metric_learning import losses as pml

    labels, x = twin.compared_batch(classes, k, normalised)
    settings = {"variant": variant, "anneal": 0.01 if classes != 3 else 0.3}
    twin.assert_equals_pml(PNP(**settings), pml.PNPLoss(**settings), labels, x)
