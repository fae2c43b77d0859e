"""The pair-weighting engine on the running Keras backend (KERAS_BACKEND): NumPy in, no
TensorFlow import, so the module runs as it is on TensorFlow, JAX and PyTorch.

The custom gradient sends the stated W (not autodiff's derivative) back through the
matrix to the embeddings, trainable keys and parameters; Contrastive (the pilot loss)
against the NumPy loops of tests/reference.py and a finite difference of them, and
against TensorFlow's value and gradient on the same batch (run in a subprocess);
scalar values, empty batches, row blocks, jit, the shared tensor functions.
"""

import functools
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

import reference as ref
from keras_dml import ops, weighting
from keras_dml.backend import gradients, name as backend_name
from keras_dml.losses import Contrastive, PairLoss, Reference, row_block_limits, row_blocks
from test_backend_pair_losses import finite_difference

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def batch(classes=4, k=3, dim=6, seed=0):
    """C x k labels (int32, shuffled) and Gaussian embeddings (float32)."""
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), k).astype("int32")
    rng.shuffle(labels)
    return labels, rng.normal(size=(classes * k, dim)).astype("float32")


def value_and_grad(function, x):
    """(function(x), d function(x) / dx) as NumPy, by the backend's autodiff (jitted on
    JAX, as its train steps are)."""

    def both(t):
        value, _, gradient = gradients.value_and_gradient(
            lambda t: (function(t), keras.ops.zeros(())), t)
        return value, gradient

    if backend_name() == "jax":
        import jax

        both = jax.jit(both)
    value, gradient = both(keras.ops.convert_to_tensor(x))
    return keras.ops.convert_to_numpy(value), keras.ops.convert_to_numpy(gradient)


class StatedWeights(PairLoss):
    """A loss whose stated weights are deliberately not the derivative of its value."""

    def compute_terms(self, matrix, pairs):
        value = keras.ops.sum(keras.ops.where(pairs.negative, matrix, 0.0), axis=1)
        weights = (keras.ops.cast(pairs.negative, "float32") * 3.0
                   - keras.ops.cast(pairs.positive, "float32") * 2.0)
        return value, weights


class ScalarLoss(PairLoss):
    """A batch-global value: the sum of the negatives' similarities (W = their mask)."""

    def compute_terms(self, matrix, pairs):
        negative = keras.ops.cast(pairs.negative, "float32")
        return keras.ops.sum(matrix * negative), negative


class Shifted(PairLoss):
    """A per-query parameter b with a stated gradient of 5 (the true one is 1)."""

    def parameters(self, pairs):
        return (keras.ops.zeros((keras.ops.shape(pairs.labels)[0],)) + 0.5,)

    def compute_terms(self, matrix, pairs, shift):
        negative = keras.ops.cast(pairs.negative, "float32")
        value = keras.ops.sum(matrix * negative, axis=1) + shift
        return value, negative, [keras.ops.full_like(shift, 5.0)]


def test_backward_pass_sends_the_stated_weights_through_the_matrix():
    labels, x = batch()
    loss = StatedWeights()
    checked, x_t, reference = loss.prepare(labels, x)
    source = loss.pair_matrix(x_t, reference)

    def total(s):
        matrix = gradients.differentiable_matrix(lambda m: m * 1.0, [s])
        pairs = loss.pairs(checked, reference, matrix.matrix)
        return keras.ops.mean(weighting.weighted_pair_loss(
            matrix, lambda m: loss.compute_terms(m, pairs)))

    _, grad = value_and_grad(total, source)
    same = labels[:, None] == labels[None, :]
    positive, negative = same & ~np.eye(len(labels), dtype=bool), ~same
    np.testing.assert_allclose(grad, (3.0 * negative - 2.0 * positive) / len(labels),
                               rtol=1e-6)


def test_stated_weights_reach_both_embeddings_through_the_normalisation():
    labels, x = batch()
    _, grad = value_and_grad(lambda e: StatedWeights()(labels, e), x)
    same = labels[:, None] == labels[None, :]
    w = (3.0 * ~same - 2.0 * (same & ~np.eye(len(labels), dtype=bool))) / len(labels)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = x / norms
    d_unit = (w + w.T) @ unit
    expected = (d_unit - unit * (d_unit * unit).sum(1, keepdims=True)) / norms
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


def test_a_scalar_value_takes_its_weights_unscaled():
    labels, x = batch()
    value, grad = value_and_grad(lambda e: ScalarLoss(metric="dot")(labels, e), x)
    negative = (labels[:, None] != labels[None, :]).astype(np.float64)
    np.testing.assert_allclose(value, np.sum((x @ x.T) * negative), rtol=1e-5)
    np.testing.assert_allclose(grad, (negative + negative.T) @ x, rtol=1e-5, atol=1e-5)


def test_a_parameter_gets_its_stated_gradient():
    labels, x = batch()
    loss = Shifted(metric="dot")
    checked, x_t, reference = loss.prepare(labels, x)

    def total(shift):
        matrix = gradients.differentiable_matrix(lambda e: loss.pair_matrix(e, reference), [x_t])
        pairs = loss.pairs(checked, reference, matrix.matrix)
        return keras.ops.sum(weighting.weighted_pair_loss(
            matrix, lambda m, b: loss.compute_terms(m, pairs, b), (shift,)))

    value, grad = value_and_grad(total, np.full(len(labels), 0.5, "float32"))
    negative = labels[:, None] != labels[None, :]
    np.testing.assert_allclose(value, np.sum((x @ x.T) * negative) + 0.5 * len(labels),
                               rtol=1e-5)
    np.testing.assert_allclose(grad, np.full(len(labels), 5.0), rtol=1e-6)


@pytest.mark.parametrize("trainable", [True, False])
def test_gradient_reaches_trainable_keys_only(trainable):
    labels, x = batch()
    rng = np.random.default_rng(1)
    keys = rng.normal(size=(5, x.shape[1])).astype("float32")
    key_labels = np.array([0, 1, 2, 3, -1], "int32")  # -1: an empty slot
    loss = Contrastive(neg_margin=-1.0)  # every negative active: W = 1 on them

    def of_keys(k):
        return loss(labels, x, reference=Reference(key_labels, k, trainable=trainable))

    _, grad = value_and_grad(of_keys, keys)
    if not trainable:
        np.testing.assert_array_equal(grad, 0.0)
        return
    unit_x, unit_k = ops.unit_rows(x), ops.unit_rows(keys)
    present = key_labels >= 0
    positive = (labels[:, None] == key_labels[None, :]) & present
    negative = (labels[:, None] != key_labels[None, :]) & present
    cosine = unit_x @ unit_k.T
    w = (negative.astype(np.float64) - positive * (cosine < 1.0)) / len(labels)
    d_unit = w.T @ unit_x
    norms = np.linalg.norm(keys, axis=1, keepdims=True)
    expected = (d_unit - unit_k * (d_unit * unit_k).sum(1, keepdims=True)) / norms
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_contrastive_value_and_gradient_match_the_numpy_reference(metric):
    labels, x = batch()
    value, grad = value_and_grad(lambda e: Contrastive(metric=metric)(labels, e), x)
    np.testing.assert_allclose(value, ref.contrastive(x, labels, metric), rtol=1e-5)
    expected = finite_difference(lambda e: ref.contrastive(e, labels, metric), x)
    np.testing.assert_allclose(grad, expected, rtol=1e-3, atol=1e-5)


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
def test_contrastive_weights_are_the_exact_derivative(metric):
    labels, x = batch()
    autodiff, stated = weighting.autodiff_weights(Contrastive(metric=metric), labels, x)
    np.testing.assert_allclose(stated, autodiff, rtol=1e-5, atol=1e-7)
    weights = weighting.pair_weights(Contrastive(metric=metric), labels, x)
    assert weights.shape == (len(labels), len(labels)) and np.all(weights >= 0)


def test_an_empty_batch_gives_a_finite_zero_and_a_zero_gradient():
    x = np.zeros((0, 6), "float32")
    value, grad = value_and_grad(lambda e: Contrastive()(np.zeros((0,), "int32"), e), x)
    assert value == 0.0 and grad.shape == (0, 6)


def test_a_class_without_positives_gives_finite_values():
    labels, x = np.arange(6).astype("int32"), batch(classes=2, k=3)[1]
    value, grad = value_and_grad(lambda e: Contrastive()(labels, e), x)
    assert np.isfinite(value) and np.all(np.isfinite(grad))


@pytest.mark.parametrize("metric", ["cosine", "euclidean"])
@pytest.mark.parametrize("keys", ["batch", "memory"])
def test_row_blocks_equal_the_whole_matrix(monkeypatch, metric, keys):
    labels, x = batch(classes=5, k=4)
    reference = None
    if keys == "memory":
        memory = np.random.default_rng(2).normal(size=(7, x.shape[1])).astype("float32")
        reference = Reference(np.array([0, 1, 2, 3, 4, 0, -1], "int32"), memory)
    whole = value_and_grad(lambda e: Contrastive(metric=metric)(labels, e, reference=reference), x)
    monkeypatch.setattr(row_block_limits, "ROW_BLOCKS_ABOVE_ENTRIES", 10)
    monkeypatch.setattr(row_block_limits, "BLOCK_ENTRIES", 3 * 20)  # blocks of 3 rows (and 2)
    assert row_blocks.applies(Contrastive(metric=metric), Reference.batch(labels, x))
    loss = Contrastive(metric=metric)
    blocked = value_and_grad(lambda e: loss(labels, e, reference=reference), x)
    np.testing.assert_allclose(blocked[0], whole[0], rtol=1e-5)
    np.testing.assert_allclose(blocked[1], whole[1], rtol=1e-4, atol=1e-6)


@pytest.mark.skipif(backend_name() != "jax", reason="jax.jit: the JAX backend's own check")
def test_the_engine_runs_under_jit_with_the_eager_value_and_gradient():
    import jax

    labels, x = batch()
    loss = Contrastive()
    eager = jax.value_and_grad(lambda e: loss(labels, e))(x)
    jitted = jax.jit(jax.value_and_grad(lambda e: loss(labels, e)))(x)
    np.testing.assert_allclose(jitted[0], eager[0], rtol=1e-6)
    np.testing.assert_allclose(jitted[1], eager[1], rtol=1e-5, atol=1e-7)


def test_l2_normalize_maps_zero_to_zero_with_a_finite_gradient():
    x = np.array([[3.0, 4.0], [0.0, 0.0]], "float32")
    value, grad = value_and_grad(lambda t: keras.ops.sum(ops.l2_normalize(t)[:, 0]), x)
    np.testing.assert_allclose(value, 0.6, rtol=1e-6)
    np.testing.assert_allclose(grad[0], [0.64 / 5.0, -0.48 / 5.0], rtol=1e-5)
    assert np.all(np.isfinite(grad[1]))


def test_similarities_between_rows_scatter_repeated_rows():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 4)).astype("float32")
    rows, columns = np.array([0, 2, 2], "int32"), np.array([1, 0, 4], "int32")
    for metric in ("cosine", "dot"):
        value, grad = value_and_grad(lambda t: keras.ops.sum(
            ops.similarities_between_rows(t, rows, columns, metric) ** 2), x)
        plain = value_and_grad(lambda t: keras.ops.sum(
            ops.pairwise(keras.ops.take(t, rows, axis=0), keras.ops.take(t, columns, axis=0),
                         metric) ** 2), x)
        np.testing.assert_allclose(value, plain[0], rtol=1e-5)
        np.testing.assert_allclose(grad, plain[1], rtol=1e-4, atol=1e-6)


def test_masked_reductions_are_finite_on_empty_rows():
    x = keras.ops.convert_to_tensor(np.array([[1.0, 2.0], [3.0, 4.0]], "float32"))
    mask = keras.ops.convert_to_tensor(np.array([[True, False], [False, False]]))
    lse = keras.ops.convert_to_numpy(ops.masked_logsumexp(x, mask))
    np.testing.assert_allclose(lse, [1.0, 0.0])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ops.masked_max(x, mask)), [1.0, 0.0])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(ops.masked_min(x, mask)), [1.0, 0.0])
    values, shares = ops.grouped_softplus_lse(keras.ops.convert_to_tensor([0.0, 1.0, 2.0]),
                                              keras.ops.convert_to_tensor([0, 0, 2]), 3)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(values),
                               [np.log(1 + 1 + np.e), 0.0, np.log(1 + np.e ** 2)], rtol=1e-6)


def test_first_pair_per_class_padded_and_exact():
    labels = keras.ops.convert_to_tensor(np.array([3, 1, 3, 2, 1, 3, 5], "int32"))
    anchors, positives, valid = (keras.ops.convert_to_numpy(t)
                                 for t in ops.first_pair_per_class(labels, padded=True))
    np.testing.assert_array_equal(anchors[valid], [0, 1])
    np.testing.assert_array_equal(positives[valid], [2, 4])
    assert len(anchors) == 3
    if backend_name() != "jax":  # JAX: static shapes, always padded
        exact = [keras.ops.convert_to_numpy(t) for t in ops.first_pair_per_class(labels)]
        np.testing.assert_array_equal(exact[0], [0, 1])
        np.testing.assert_array_equal(exact[1], [2, 4])


def test_bad_input_is_a_clear_error():
    labels, x = batch()
    with pytest.raises(ValueError, match="NaN or Inf"):
        Contrastive()(labels, np.where(np.eye(*x.shape, dtype=bool), np.nan, x))
    with pytest.raises(ValueError, match="non-integer"):
        Contrastive()(labels + 0.5, x)
    with pytest.raises(ValueError, match="strings"):
        Contrastive()(np.array(["a"] * len(labels)), x)
    with pytest.raises(ValueError, match="overflows float32"):
        Contrastive(metric="euclidean", neg_margin=1e30)(labels, 1e30 * x)


# -- the same batch on TensorFlow ------------------------------------------------------
CROSS_CASES = {"contrastive_cosine": ("cosine", {}),
               "contrastive_euclidean": ("euclidean", {"neg_margin": 2.0}),
               "contrastive_cosine_margins": ("cosine", {"pos_margin": 0.7, "neg_margin": 0.1})}


@functools.lru_cache(maxsize=None)
def cross_results():
    """{case: (value, gradient)} of `CROSS_CASES` on the running backend."""
    labels, x = batch(classes=6, k=4, dim=8, seed=5)
    results = {}
    for case, (metric, kwargs) in CROSS_CASES.items():
        value, grad = value_and_grad(lambda e: Contrastive(metric=metric, **kwargs)(labels, e), x)
        results[case] = (float(value), grad.tolist())
    return results


@pytest.fixture(scope="module")
def tensorflow_results():
    if backend_name() == "tensorflow":
        pytest.skip("this is TensorFlow: the cross-backend check runs on JAX and PyTorch")
    pytest.importorskip("tensorflow", reason="TensorFlow is not installed here")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])  # this checkout's keras_dml
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="2",
                       PYTHONPATH=path)
    output = subprocess.run([sys.executable, os.path.abspath(__file__)], env=environment,
                            cwd=root, capture_output=True, text=True, check=True).stdout
    return json.loads(output.strip().splitlines()[-1])


@pytest.mark.parametrize("case", sorted(CROSS_CASES))
def test_value_and_gradient_equal_tensorflows(tensorflow_results, case):
    ours = cross_results()[case]
    theirs = tensorflow_results[case]
    np.testing.assert_allclose(ours[0], theirs[0], rtol=1e-5)
    gradient, expected = np.asarray(ours[1]), np.asarray(theirs[1])
    np.testing.assert_allclose(gradient, expected, rtol=1e-5,
                               atol=1e-5 * np.max(np.abs(expected)))


if __name__ == "__main__":  # the TensorFlow side of the cross-backend check
    print(json.dumps(cross_results()))
