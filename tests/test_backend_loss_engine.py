"""What the engine checks in a loss it is given, on every backend: the shapes of
`compute_terms`, W by autodiff for a loss that writes only `compute_value` (equal to a
hand-written W), the non-finite derivatives of unsafe ops, and a built-in loss called
bare inside `jax.jit`.
"""

import keras
import numpy as np
import pytest

import user_losses
from keras_dml import losses, ops, weighting
from keras_dml.backend import gradients
from keras_dml.losses import PairLoss
from keras_dml.testing import contract

#: Runs on every Keras backend, and in TensorFlow's quick tier too (no other module tests
#: these checks there).
pytestmark = pytest.mark.backend_neutral(quick_on_tensorflow=True)


def _batch(seed=0):
    rng = np.random.default_rng(seed)
    return (np.repeat(np.arange(4), 3).astype("int32"),
            rng.normal(size=(12, 8)).astype("float32"))


def _value_and_gradient(loss, labels, x):
    return contract.value_and_gradient(loss, labels, x)


class _Shaped(PairLoss):
    """Returns a value and W of the shapes it is told (the matrix is (N, M))."""

    def __init__(self, value_shape, weights_shape, **kwargs):
        super().__init__(**kwargs)
        self.value_shape, self.weights_shape = value_shape, weights_shape

    def compute_terms(self, matrix, pairs):
        n, m = matrix.shape
        size = {"N": n, "M": m, "1": 1}
        value = keras.ops.sum(matrix) * keras.ops.ones([size[s] for s in self.value_shape])
        weights = keras.ops.ones([size[s] for s in self.weights_shape])
        return value, weights


@pytest.mark.parametrize("value_shape, weights_shape", [
    ("N1", "N"),    # the case: value (N, 1), W (N,)
    ("N", "N1"),    # W (N, 1)
    ("N", "1M"),    # W (1, M)
    ("N1", "NM"),   # value (N, 1)
    ("", "N"),      # a scalar value with W (N,)
])
def test_wrong_shapes_raise_naming_the_loss_and_the_shapes(value_shape, weights_shape):
    labels, x = _batch()
    loss = _Shaped(tuple(value_shape), tuple(weights_shape))
    for call in (lambda: loss(labels, x), lambda: weighting.autodiff_weights(loss, labels, x),
                 lambda: weighting.pair_weights(loss, labels, x)):
        with pytest.raises(ValueError, match=r"_Shaped.compute_terms returned a value of "
                                             r"shape \(.*\) and weights of shape"):
            call()


@pytest.mark.parametrize("value_shape", ["N", ""])
def test_right_shapes_pass(value_shape):
    labels, x = _batch()
    value, gradient = _value_and_gradient(_Shaped(tuple(value_shape), ("N", "M")), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient))


class _ShiftedGradientShape(PairLoss):
    """A per-query parameter whose stated gradient has the wrong shape."""

    def parameters(self, pairs):
        return (keras.ops.zeros((keras.ops.shape(pairs.labels)[0],)),)

    def compute_terms(self, matrix, pairs, shift):
        return keras.ops.sum(matrix, axis=1) + shift, keras.ops.ones_like(matrix), [
            keras.ops.ones((1,))]


def test_a_parameter_gradient_of_the_wrong_shape_raises():
    labels, x = _batch()
    with pytest.raises(ValueError, match=r"gradient of shape \(1,\) for parameter 0 of "
                                         r"shape \(12,\)"):
        _ShiftedGradientShape()(labels, x)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_value_only_loss_gets_the_hand_written_weights_by_autodiff(seed):
    labels, x = _batch(seed)
    by_value = user_losses.ValueContrastive(neg_margin=0.3)
    by_hand = losses.Contrastive(pos_margin=1.0, neg_margin=0.3)
    autodiff, weights = weighting.autodiff_weights(by_value, labels, x)
    _, hand_written = weighting.autodiff_weights(by_hand, labels, x)
    np.testing.assert_allclose(weights, hand_written, atol=1e-6)
    np.testing.assert_allclose(weights, autodiff, atol=1e-6)
    assert np.abs(weights).sum() > 0
    value, gradient = _value_and_gradient(by_value, labels, x)
    expected_value, expected_gradient = _value_and_gradient(by_hand, labels, x)
    np.testing.assert_allclose(value, expected_value, rtol=1e-6)
    np.testing.assert_allclose(gradient, expected_gradient, rtol=1e-5, atol=1e-7)


def test_a_batch_global_value_gets_its_weights_by_autodiff():
    labels, x = _batch()
    loss = user_losses.MeanOverPairs()
    terms = loss.terms(labels, x)
    assert np.ndim(keras.ops.convert_to_numpy(terms.value)) == 0
    negative = keras.ops.convert_to_numpy(terms.negative)
    similarity = keras.ops.convert_to_numpy(ops.pairwise(x))
    expected = np.where(negative & (similarity > 0.2), 1.0, 0.0) / negative.sum()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(terms.weights), expected, atol=1e-7)


class _MaskedArccos(PairLoss):
    """The angle of each positive, arccos masked to the positives: arccos' derivative
    is infinite at a self-pair's cosine of 1, off the pairs."""

    def compute_value(self, matrix, pairs):
        angles = keras.ops.where(pairs.positive, keras.ops.arccos(matrix), 0.0)
        return keras.ops.sum(angles, axis=1)


class _UnsafeSqrt(PairLoss):
    """sqrt at 0 on the negative pairs themselves (sqrt(0 |S|): its derivative is
    inf * 0 = NaN on every backend)."""

    def compute_value(self, matrix, pairs):
        root = keras.ops.sqrt(0.0 * keras.ops.abs(matrix))
        return keras.ops.sum(keras.ops.where(pairs.negative, matrix + root, 0.0), axis=1)


def test_an_infinite_derivative_off_the_pairs_is_masked():
    labels, x = _batch()
    value, gradient = _value_and_gradient(_MaskedArccos(), labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient)) and np.any(gradient)
    autodiff, weights = weighting.autodiff_weights(_MaskedArccos(), labels, x)
    positive = keras.ops.convert_to_numpy(_MaskedArccos().terms(labels, x).positive)
    assert np.all(np.isfinite(weights)) and np.all(weights[~positive] == 0)


def test_an_infinite_derivative_on_the_pairs_names_the_safe_ops():
    labels, x = _batch()
    with pytest.raises(ValueError, match=r"_UnsafeSqrt.*keras_dml\.ops\.safe_sqrt and "
                                         r"keras_dml\.ops\.safe_arccos"):
        _UnsafeSqrt()(labels, x)


def test_safe_arccos_is_finite_with_a_finite_gradient_at_plus_and_minus_one():
    x = keras.ops.convert_to_tensor(np.array([-1.0, -0.5, 0.0, 0.5, 1.0], "float32"))
    value, _, gradient = gradients.value_and_gradient(lambda t: (ops.safe_arccos(t), ()), x)
    value, gradient = keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(gradient)
    np.testing.assert_allclose(value, np.arccos([-1.0, -0.5, 0.0, 0.5, 1.0]), atol=2e-3)
    np.testing.assert_allclose(gradient[1:4], -1 / np.sqrt(1 - np.array([0.25, 0, 0.25])),
                               rtol=1e-5)
    assert np.all(np.isfinite(gradient))


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="jax.jit: the JAX backend")
@pytest.mark.parametrize("make", [lambda: losses.ArcFace(num_classes=8),
                                  lambda: losses.ProxyAnchor(num_classes=8),
                                  losses.MultiSimilarity])
def test_a_loss_first_called_bare_inside_jax_jit_then_eagerly(make):
    """A loss whose state (proxies) is made at its first call, first called inside a
    bare `jax.jit`: its state holds values, not a leaked tracer."""
    import jax

    labels, x = _batch()
    loss = make()
    jitted = jax.jit(lambda labels, x: loss(labels, x))
    first = float(jitted(labels, x))
    np.testing.assert_allclose(float(loss(labels, x)), first, rtol=1e-5)
    np.testing.assert_allclose(float(jitted(labels, x)), first, rtol=1e-5)
    gradient = jax.jit(jax.grad(lambda x: loss(labels, x)))(x)
    assert np.all(np.isfinite(np.asarray(gradient)))
