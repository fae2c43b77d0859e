"""Circle, SupervisedContrastive, NTXent, SmoothAP and MultipleNegativesRanking:
NumPy loops from the papers, pytorch-metric-learning 2.9, keras.losses.Circle, exact
pair weights, eager / tf.function / XLA, mixed precision, serialization, degenerate
batches."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference_margin_softmax_and_pair_family as ref
from keras_dml.losses import (Circle, MultipleNegativesRanking, NTXent, SmoothAP,
                              SupervisedContrastive)

CASES = {
    "Circle": (lambda: Circle(), lambda x, y: ref.circle(x, y)),
    "Circle-face": (lambda: Circle(margin=0.25, gamma=256.0),
                    lambda x, y: ref.circle(x, y, 0.25, 256.0)),
    "SupCon": (lambda: SupervisedContrastive(), lambda x, y: ref.supcon(x, y)),
    "SupCon-0.5": (lambda: SupervisedContrastive(0.5), lambda x, y: ref.supcon(x, y, 0.5)),
    "NTXent": (lambda: NTXent(), lambda x, y: ref.ntxent(x, y)),
    "NTXent-0.2": (lambda: NTXent(0.2), lambda x, y: ref.ntxent(x, y, 0.2)),
    "SmoothAP": (lambda: SmoothAP(), lambda x, y: ref.smooth_ap(x, y)),
    "SmoothAP-paper": (lambda: SmoothAP(0.05, include_anchor=False),
                       lambda x, y: ref.smooth_ap(x, y, 0.05, False)),
}
UNSORTED = np.array([3, 1, 3, 2, 1, 1, 0, 2, 5, 0], "int32")  # unequal counts, a singleton


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("labels", ["cxk", "unsorted"])
def test_matches_numpy_reference_with_exact_weights(name, labels):
    make, reference = CASES[name]
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


@pytest.mark.parametrize("cls", [Circle, SupervisedContrastive, NTXent, SmoothAP])
@pytest.mark.parametrize("classes, k", [(4, 4), (8, 2)])
def test_equals_pytorch_metric_learning(cls, classes, k):
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


def test_circle_value_equals_keras_circle_on_normalised_embeddings():
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=9)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    for margin, gamma in [(0.4, 80.0), (0.25, 256.0)]:
        theirs = keras.losses.Circle(gamma=gamma, margin=margin)
        np.testing.assert_allclose(float(Circle(margin, gamma)(labels, unit)),
                                   float(theirs(labels, unit)), rtol=1e-5)


def test_smooth_ap_gathers_positives_instead_of_a_cubic_tensor():
    """No (N, ., N) tensor in the forward + backward graph; XLA compiles the same graph
    (one loop over positive slots, no static-shape special case)."""
    labels, x = checks.batch(classes=32, k=2, dim=4, seed=0)
    n = len(labels)
    shapes = checks.traced_tensor_shapes(SmoothAP(), labels, x)
    assert not any(len(s) == 3 and s[1] == n and s[2] == n for s in shapes if s.rank)


# -- multiple negatives ranking ------------------------------------------------------


def pairs_batch(n=8, dim=5, seed=0, scale=0.5):
    rng = np.random.default_rng(seed)
    queries = rng.normal(size=(n, dim))
    documents = queries + scale * rng.normal(size=(n, dim))
    return np.concatenate([queries, documents], axis=1).astype("float32")


@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("labels", [np.arange(8), np.array([0, 1, 2, 2, 3, 4, 5, 1])])
def test_multiple_negatives_ranking_matches_loop(symmetric, labels):
    labels = labels.astype("int32")
    pairs = pairs_batch()
    for scale in (20.0, 5.0):
        loss = MultipleNegativesRanking(scale=scale, symmetric=symmetric)
        value = float(loss(labels, pairs))
        np.testing.assert_allclose(
            value, ref.multiple_negatives_ranking(pairs, labels, scale, symmetric), rtol=1e-5)
        checks.assert_exact_weights(loss, labels, pairs, atol=1e-5)


def test_multiple_negatives_ranking_rejects_odd_width():
    with pytest.raises(ValueError, match="odd"):
        MultipleNegativesRanking()(np.arange(4), np.ones((4, 5), "float32"))


def test_two_tower_dml_model_trains_and_saves(tmp_path):
    from keras_dml.models import DMLModel

    rng = np.random.default_rng(0)
    queries = rng.normal(size=(256, 12)).astype("float32")
    documents = (queries @ rng.normal(size=(12, 12)) + 0.1 * rng.normal(size=(256, 12)))
    documents = documents.astype("float32")
    q_in, d_in = keras.Input((12,), name="query"), keras.Input((12,), name="document")
    q_tower = keras.layers.Dense(8, name="query_tower")(q_in)
    d_tower = keras.layers.Dense(8, name="document_tower")(d_in)
    model = DMLModel([q_in, d_in], keras.layers.Concatenate()([q_tower, d_tower]))
    model.compile(keras.optimizers.Adam(1e-2), loss="keras_dml>MultipleNegativesRanking")
    ids = np.arange(256)
    before = model.evaluate([queries, documents], ids, batch_size=64, verbose=0)
    model.fit([queries, documents], ids, batch_size=64, epochs=8, verbose=0)
    after = model.evaluate([queries, documents], ids, batch_size=64, verbose=0)
    assert after < 0.5 * before
    path = str(tmp_path / "two_tower.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(loaded.evaluate([queries, documents], ids, batch_size=64,
                                               verbose=0), after, rtol=1e-5)


# -- shared behaviour ------------------------------------------------------------------

ALL = [Circle, SupervisedContrastive, NTXent, SmoothAP]


@pytest.mark.parametrize("make", ALL + [lambda: MultipleNegativesRanking(symmetric=True)])
def test_eager_function_and_xla_agree(make):
    labels, x = checks.batch(classes=4, k=3, dim=6, seed=4)
    if make is SmoothAP:  # unsorted, uneven classes: the loop over positive slots
        labels = UNSORTED
        x = np.random.default_rng(1).normal(size=(len(labels), 6)).astype("float32")
    checks.assert_modes_agree(make(), labels, x)


@pytest.mark.parametrize("cls", ALL + [MultipleNegativesRanking])
def test_mixed_float16_gives_float32(cls):
    labels, x = checks.batch(classes=4, k=3, dim=8, seed=5, scale=0.5)
    checks.assert_mixed_precision(cls, labels, x)


@pytest.mark.parametrize("cls", ALL + [MultipleNegativesRanking])
def test_degenerate_batches_are_finite(cls):
    # SupCon keeps the paper's value without negatives (A(i) = P(i)), and SmoothAP's
    # AP of an all-positive ranking is 1 up to rounding in its gradient: finite, not 0.
    zero = {MultipleNegativesRanking: (), SupervisedContrastive: ("single_sample",),
            SmoothAP: ("single_sample",)}.get(cls, ("one_class", "single_sample"))
    rng = np.random.default_rng(3)
    for name, labels in checks.DEGENERATE_BATCHES.items():
        x = rng.normal(size=(len(labels), 8)).astype("float32")
        value, gradient = checks.value_and_gradient(cls(), labels.astype("int32"), x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient)), name
        if name in zero:
            assert value == 0.0 and not np.any(gradient), (name, value)


@pytest.mark.parametrize("loss", [
    Circle(margin=0.25, gamma=128.0), SupervisedContrastive(0.2), NTXent(0.5),
    SmoothAP(0.05, include_anchor=False), MultipleNegativesRanking(10.0, symmetric=True),
])
def test_config_and_save_load(loss, tmp_path):
    checks.assert_config_round_trip(loss)
    if not isinstance(loss, MultipleNegativesRanking):
        checks.assert_save_load(loss, tmp_path)


@pytest.mark.parametrize("make, match", [
    (lambda: Circle(gamma=0), "gamma"), (lambda: Circle(margin=float("nan")), "margin"),
    (lambda: SupervisedContrastive(-1), "temperature"), (lambda: NTXent(0), "temperature"),
    (lambda: SmoothAP(0), "temperature"), (lambda: MultipleNegativesRanking(0), "scale"),
])
def test_bad_hyperparameters(make, match):
    with pytest.raises(ValueError, match=match):
        make()
