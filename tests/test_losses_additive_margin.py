"""ArcFace, CosFace and SubCenterArcFace: NumPy loops of the papers' equations,
pytorch-metric-learning 2.9 with the same weights, logits, the outlier helper, modes,
mixed precision, serialization and DMLModel save/load."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import loss_checks as checks
import reference_margin_softmax_and_pair_family as ref
from keras_dml import weighting
from keras_dml.losses import ArcFace, CosFace, SubCenterArcFace

C, DIM = 5, 8


def with_weights(loss, seed=1):
    loss.trainable_layer.build((None, DIM))
    values = np.random.default_rng(seed).normal(size=loss.proxies.shape).astype("float32")
    loss.proxies.assign(values)
    return values


def batch(n=15, seed=0):
    rng = np.random.default_rng(seed)
    return (np.arange(n) % C).astype("int32"), rng.normal(size=(n, DIM)).astype("float32")


SETTINGS = [
    (lambda: ArcFace(C), "arc", 28.6, 64.0, 1),
    (lambda: ArcFace(C, margin=10.0, scale=16.0), "arc", 10.0, 16.0, 1),
    (lambda: ArcFace(C, margin=120.0, scale=8.0), "arc", 120.0, 8.0, 1),  # the fallback
    (lambda: CosFace(C), "cos", 0.35, 64.0, 1),
    (lambda: CosFace(C, margin=0.1, scale=10.0), "cos", 0.1, 10.0, 1),
    (lambda: SubCenterArcFace(C), "arc", 28.6, 64.0, 3),
    (lambda: SubCenterArcFace(C, sub_centers=2, margin=20.0, scale=30.0), "arc", 20.0, 30.0, 2),
]


@pytest.mark.parametrize("make, kind, margin, scale, k", SETTINGS)
def test_matches_numpy_reference_and_autodiff(make, kind, margin, scale, k):
    loss = make()
    labels, x = batch(seed=3)
    weights = with_weights(loss)
    np.testing.assert_allclose(float(loss(labels, x)),
                               ref.margin_softmax(x, labels, weights, kind, margin, scale, k),
                               rtol=1e-5)
    autodiff, w = weighting.autodiff_weights(loss, labels, x)
    np.testing.assert_allclose(w, autodiff, rtol=1e-5, atol=1e-5)


def _pml(loss):
    from pytorch_metric_learning import losses as pml

    if isinstance(loss, SubCenterArcFace):
        return pml.SubCenterArcFaceLoss(num_classes=C, embedding_size=DIM,
                                        sub_centers=loss.sub_centers, margin=loss.margin,
                                        scale=loss.scale)
    cls = pml.ArcFaceLoss if isinstance(loss, ArcFace) else pml.CosFaceLoss
    return cls(C, DIM, margin=loss.margin, scale=loss.scale)


@pytest.mark.slow  # peer reference (PyTorch, PML)
@pytest.mark.parametrize("make", [s[0] for s in SETTINGS])
def test_equals_pytorch_metric_learning_with_the_same_weights(make):
    import torch

    loss = make()
    labels, x = batch(n=20, seed=4)
    weights = with_weights(loss, seed=2)
    theirs = _pml(loss).double()
    with torch.no_grad():  # PML's W is (d, C K), class-major columns: our proxies^T
        theirs.W.copy_(torch.tensor(weights.T, dtype=torch.float64))
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    expected = theirs(xt, torch.tensor(labels, dtype=torch.long))
    expected.backward()
    xv = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xv)
        value = loss(labels, xv)
    dx, dw = tape.gradient(value, [xv, loss.proxies])
    np.testing.assert_allclose(float(value), expected.item(), rtol=1e-5)
    for ours, their in [(dx, xt.grad.numpy()), (dw, theirs.W.grad.numpy().T)]:
        top = np.abs(their).max()
        np.testing.assert_allclose(np.asarray(ours) / top, their / top, rtol=1e-5, atol=1e-5)
    logits = theirs.get_logits(torch.tensor(x, dtype=torch.float64)).detach().numpy()
    np.testing.assert_allclose(loss.logits(x), logits, rtol=1e-5, atol=1e-4)


def test_gradient_is_finite_on_the_class_weight():
    loss = ArcFace(C)
    labels, x = batch(n=5)
    weights = with_weights(loss)
    x = weights[labels] * 3.0  # theta = 0 exactly: d cos(theta + m) / d cos theta is finite
    _, gradient = checks.value_and_gradient(loss, labels, x)
    assert np.all(np.isfinite(gradient))


def test_outliers_are_far_from_the_dominant_sub_center():
    loss = SubCenterArcFace(2, sub_centers=2)
    loss.trainable_layer.build((None, 3))
    loss.proxies.assign(np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, 0, 0]], "float32"))
    x = np.array([[1, 0.1, 0], [1, 0, 0.1], [0.05, 1, 0], [0, 0, 1], [0, 0.1, 1],
                  [-1, 0, 0.2]], "float32")
    labels = np.array([0, 0, 0, 1, 1, 1])
    outliers, dominant = loss.outliers(x, labels, threshold=75)
    np.testing.assert_array_equal(outliers, [2, 5])  # 2 sits on class 0's minor centre
    np.testing.assert_allclose(dominant, [[1, 0, 0], [0, 0, 1]])
    with pytest.raises(ValueError, match="labels must lie"):
        loss.outliers(x, labels + 1)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [ArcFace, CosFace, SubCenterArcFace])
def test_modes_mixed_precision_and_degenerate(cls):
    labels, x = batch(seed=6)
    loss = cls(C)
    weights = with_weights(loss)
    checks.assert_modes_agree(loss, labels, x, rtol=1e-5, atol=1e-5)
    policy = keras.config.dtype_policy()
    try:
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        half = cls(C)
        half.trainable_layer.build((None, DIM))
        half.proxies.assign(weights)
        value = half(labels, tf.constant(x, tf.float16))
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    assert value.dtype == tf.float32
    np.testing.assert_allclose(float(value), float(loss(labels, x)), rtol=1e-3)  # float16 inputs
    for labels, x in [(np.zeros(4, "int32"), np.zeros((4, DIM), "float32")),
                      (np.array([2], "int32"), np.ones((1, DIM), "float32"))]:
        value, gradient = checks.value_and_gradient(loss, labels, x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient))


@pytest.mark.parametrize("loss", [ArcFace(7, margin=20.0, scale=30.0, proxy_lr_multiplier=10.0),
                                  CosFace(7, margin=0.2, scale=32.0),
                                  SubCenterArcFace(7, sub_centers=2)])
def test_config_round_trip(loss):
    clone = type(loss).from_config(loss.get_config())
    assert clone.get_config() == loss.get_config()
    assert clone.proxies_per_class == loss.proxies_per_class
    restored = keras.losses.get({"class_name": f"keras_dml>{type(loss).__name__}",
                                 "config": loss.get_config()})
    assert type(restored) is type(loss)


def test_bad_arguments():
    for make, match in [(lambda: ArcFace(C, margin=180), "degrees"),
                        (lambda: ArcFace(C, scale=0), "scale"),
                        (lambda: CosFace(C, margin=-1), "margin"),
                        (lambda: SubCenterArcFace(C, sub_centers=0), "sub_centers"),
                        (lambda: ArcFace(0), "num_classes")]:
        with pytest.raises(ValueError, match=match):
            make()


@pytest.mark.slow
def test_dml_model_trains_saves_and_classifies(tmp_path):
    checks.assert_classifier_trains_and_reloads(SubCenterArcFace(C, sub_centers=2, scale=16.0),
                                                C, tmp_path)
