"""The softmax family, the proxy losses, Combined, CrossBatchMemory and the layers on any
Keras backend (KERAS_BACKEND from the environment; NumPy in, no TensorFlow import).

Values are checked against the NumPy loops of tests/reference*.py and gradients,
to the embeddings and to the proxies, against central differences of those loops in
float64: a check that holds on every backend the same way.
"""

import keras
import numpy as np
import pytest

import reference as ref
import reference_margin_softmax_and_pair_family as family_ref
from keras_dml import layers, losses
from keras_dml.layers import regularizers
from keras_dml.layers.momentum import MomentumEncoder
from keras_dml.layers.proxies import Proxies

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral

BACKEND = keras.backend.backend()
CLASSES, PER_CLASS, DIM = 4, 3, 6
LABELS = np.repeat(np.arange(CLASSES), PER_CLASS).astype("int32")


def _embeddings(seed=0, n=CLASSES * PER_CLASS):
    return (0.7 * np.random.default_rng(seed).normal(size=(n, DIM))).astype("float32")


def numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def value_and_gradients(fn, inputs, variables=()):
    """(fn(*inputs), [d fn / d input], [d fn / d variable]) by the backend's autodiff;
    `fn` returns a scalar, `inputs` are NumPy arrays, `variables` Keras variables that
    `fn` reads. On JAX the step is jitted, as in `fit`."""
    if BACKEND == "tensorflow":
        import tensorflow as tf

        xs = [tf.constant(x) for x in inputs]
        with tf.GradientTape() as tape:
            tape.watch(xs)
            value = fn(*xs)
        grads = tape.gradient(value, xs + [v.value for v in variables])
    elif BACKEND == "jax":
        import jax

        def pure(xs, values):
            with keras.StatelessScope(state_mapping=list(zip(variables, values))):
                return fn(*xs)

        value, (gx, gv) = jax.jit(jax.value_and_grad(pure, argnums=(0, 1)))(
            [jax.numpy.asarray(x) for x in inputs], [v.value for v in variables])
        grads = list(gx) + list(gv)
    elif BACKEND == "torch":
        import torch

        xs = [torch.tensor(x, requires_grad=True) for x in inputs]
        value = fn(*xs)
        grads = torch.autograd.grad(value, xs + [v.value for v in variables])
    else:
        raise ValueError(f"No autodiff helper for the Keras backend {BACKEND!r}.")
    grads = [numpy(g) for g in grads]
    return float(numpy(value)), grads[:len(inputs)], grads[len(inputs):]


def directional_derivatives(fn, point, directions, step=1e-5):
    """Central differences of `fn` (float64 arrays -> float) at `point` (a list of
    arrays) along each direction (a list of arrays shaped like `point`)."""
    point = [np.asarray(a, np.float64) for a in point]

    def at(sign, direction):
        return fn(*[a + sign * step * d for a, d in zip(point, direction)])

    return np.array([(at(1, d) - at(-1, d)) / (2 * step) for d in directions])


def check_gradients(fn, point, gradients, count=3, seed=0):
    """The autodiff `gradients` of `fn` at `point` agree with central differences along
    random normal directions, each array of `point` on its own (to 1e-4 of ||g||)."""
    rng = np.random.default_rng(seed)
    for index, gradient in enumerate(gradients):
        directions = []
        for _ in range(count):
            direction = [np.zeros_like(a, np.float64) for a in point]
            direction[index] = rng.normal(size=np.shape(point[index]))
            directions.append(direction)
        want = directional_derivatives(fn, point, directions)
        got = np.array([(gradient * d[index]).sum() for d in directions])
        scale = 3.0 * np.linalg.norm(gradient)  # |<g, d>| for a normal d is about ||g||
        np.testing.assert_allclose(got, want, atol=1e-4 * max(scale, 1e-12))


#: loss factory (num_classes C) and its NumPy reference fn(loss, x, proxies) -> value
PROXY_LOSSES = {
    "ProxyAnchor": (lambda: losses.ProxyAnchor(CLASSES), lambda loss, x, p: ref.proxy_anchor(
        x, LABELS, p, loss.alpha, loss.delta)[0]),
    "ProxyNCA": (lambda: losses.ProxyNCA(CLASSES, scale=3.0), lambda loss, x, p: ref.proxy_nca(
        x, LABELS, p, loss.scale)),
    "NormalizedSoftmax": (lambda: losses.NormalizedSoftmax(CLASSES, temperature=0.1),
                          lambda loss, x, p: ref.normalized_softmax(x, LABELS, p,
                                                                    loss.temperature)),
    "SoftTriple": (lambda: losses.SoftTriple(CLASSES, centers_per_class=3),
                   lambda loss, x, p: ref.soft_triple(x, LABELS, p, 3, loss.la, loss.gamma,
                                                      loss.tau, loss.margin)),
    "ArcFace": (lambda: losses.ArcFace(CLASSES, scale=16.0),
                lambda loss, x, p: family_ref.margin_softmax(x, LABELS, p, "arc", loss.margin,
                                                             loss.scale)),
    "CosFace": (lambda: losses.CosFace(CLASSES, scale=16.0),
                lambda loss, x, p: family_ref.margin_softmax(x, LABELS, p, "cos", loss.margin,
                                                             loss.scale)),
    "SubCenterArcFace": (lambda: losses.SubCenterArcFace(CLASSES, sub_centers=2, scale=16.0),
                         lambda loss, x, p: family_ref.margin_softmax(
                             x, LABELS, p, "arc", loss.margin, loss.scale, 2)),
}


def _with_proxies(loss, seed=1):
    loss.trainable_layer.build((None, DIM))
    proxies = np.random.default_rng(seed).normal(size=tuple(loss.proxies.shape))
    loss.proxies.assign(proxies.astype("float32"))
    return numpy(loss.proxies).astype("float64")


@pytest.mark.parametrize("name", sorted(PROXY_LOSSES))
def test_proxy_loss_value_and_gradients_match_the_numpy_reference(name):
    make, reference = PROXY_LOSSES[name]
    loss = make()
    proxies = _with_proxies(loss)
    x = _embeddings()
    value, (dx,), (dp,) = value_and_gradients(lambda e: loss(LABELS, e), [x], [loss.proxies])
    expected = reference(loss, x.astype("float64"), proxies)
    np.testing.assert_allclose(value, expected, rtol=1e-5)
    check_gradients(lambda e, p: reference(loss, e, p), [x, proxies], [dx, dp])


@pytest.mark.parametrize("make, reference", [
    (lambda: losses.NPair(), lambda x: ref.npair(LABELS, x, 0.002, "dot")),
    (lambda: losses.NPair(tuples="one_per_class"), lambda x: ref.npair_mc(LABELS, x, 0.002,
                                                                          "dot")),
    (lambda: losses.NCA(scale=4.0), lambda x: ref.nca(LABELS, x, 4.0, "cosine")),
], ids=["npair", "npair_mc", "nca"])
def test_pair_softmax_losses_match_the_numpy_reference(make, reference):
    x = _embeddings(seed=2)
    value, (dx,), _ = value_and_gradients(lambda e: make()(LABELS, e), [x])
    np.testing.assert_allclose(value, reference(x.astype("float64")), rtol=1e-5)
    check_gradients(reference, [x], [dx])


def test_instance_cross_entropy_value_and_stated_weights():
    # ICE's backward pass is eq. 13-14's reweighting, not the derivative of its value
    x = _embeddings(seed=3)
    loss = losses.InstanceCrossEntropy(scale=8.0)
    value, (dx,), _ = value_and_gradients(lambda e: loss(LABELS, e), [x])
    np.testing.assert_allclose(value, ref.ice_loss(LABELS, ref.cosine(x), 8.0), rtol=1e-5)
    weights = ref.ice_gradient(LABELS, ref.cosine(x), 8.0)  # dL/dS, (N, N)
    unit = ref.unit(x)
    norms = np.linalg.norm(x.astype("float64"), axis=1, keepdims=True)
    g_unit = (weights + weights.T) @ unit
    want = (g_unit - unit * (g_unit * unit).sum(1, keepdims=True)) / norms
    np.testing.assert_allclose(dx, want, atol=1e-5 * np.abs(want).max())


def test_combined_is_the_weighted_sum_of_its_terms_and_reports_each():
    x = _embeddings(seed=4)
    combined = losses.Combined([losses.NCA(scale=4.0), losses.ProxyNCA(CLASSES)], [1.0, 0.5])
    proxies = _with_proxies(combined.losses[1])
    value, _, (dp,) = value_and_gradients(lambda e: combined(LABELS, e), [x],
                                          [combined.losses[1].proxies])
    nca = ref.nca(LABELS, x.astype("float64"), 4.0, "cosine")
    proxy_nca = ref.proxy_nca(x.astype("float64"), LABELS, proxies, 1.0)
    np.testing.assert_allclose(value, nca + 0.5 * proxy_nca, rtol=1e-5)
    check_gradients(lambda p: 0.5 * ref.proxy_nca(x.astype("float64"), LABELS, p, 1.0),
                    [proxies], [dp])
    if BACKEND != "jax":  # under jax.value_and_grad the metric holds a tracer
        terms = [float(numpy(metric.result())) for metric in combined.trainable_layer.terms]
        np.testing.assert_allclose(terms, [nca, proxy_nca], rtol=1e-5)


def _memory_steps(loss, batches, jit):
    """The loss of each batch and the bank's state after them, each step stateless on
    JAX (as a jitted train step runs it) and eager elsewhere."""
    bank = loss.trainable_layer
    bank.build((None, DIM))
    if BACKEND != "jax" or not jit:
        return [float(numpy(loss(y, x))) for y, x in batches], [numpy(v) for v in bank.weights]
    import jax

    @jax.jit
    def step(state, y, x):
        with keras.StatelessScope(state_mapping=list(zip(bank.weights, state))) as scope:
            value = loss(y, x)
        return value, [scope.get_current_value(v) for v in bank.weights]

    state, values = [v.value for v in bank.weights], []
    for y, x in batches:
        value, state = step(state, y, x)
        values.append(float(value))
    return values, [numpy(v) for v in state]


@pytest.mark.parametrize("jit", [False, True])
def test_cross_batch_memory_over_steps(jit):
    # memory of 8 entries, batches of 4: from step 3 on the oldest batch is overwritten
    rng = np.random.default_rng(5)
    batches = [(rng.integers(0, 3, 4).astype("int32"), _embeddings(seed=10 + i, n=4))
               for i in range(4)]
    loss = losses.CrossBatchMemory(losses.NCA(scale=4.0), memory_size=8, warmup_steps=1)
    values, (embeddings, labels, filled, next_slot, steps) = _memory_steps(loss, batches, jit)
    # warm-up: the batch alone; then the batch against the memory (itself included)
    expected = [ref.nca(batches[0][0], batches[0][1].astype("float64"), 4.0, "cosine")]
    memory_x, memory_y = [], []
    for y, x in batches[1:]:
        memory_x, memory_y = (memory_x + [x])[-2:], (memory_y + [y])[-2:]
        keys, key_labels = np.concatenate(memory_x), np.concatenate(memory_y)
        s = ref.unit(x) @ ref.unit(keys).T * 4.0
        own = len(keys) - len(x) + np.arange(len(x))
        total = []
        for i in range(len(x)):
            others = [j for j in range(len(keys)) if j != own[i]]
            positives = [j for j in others if key_labels[j] == y[i]]
            if positives:
                lse = np.log(np.exp(s[i, others]).sum())
                total.append(lse - np.log(np.exp(s[i, positives]).sum()))
            else:
                total.append(0.0)
        expected.append(np.mean(total))
    np.testing.assert_allclose(values, expected, rtol=1e-5)
    np.testing.assert_array_equal(labels, np.concatenate([batches[3][0], batches[2][0]]))
    np.testing.assert_allclose(embeddings, np.concatenate([batches[3][1], batches[2][1]]))
    assert (int(filled), int(next_slot), int(steps)) == (8, 4, 4)


def test_proxies_layer_returns_its_weight_and_rejects_another_size():
    layer = Proxies(3, proxies_per_class=2)
    out = layer(np.zeros((5, DIM), "float32"))
    assert tuple(out.shape) == (6, DIM)
    np.testing.assert_array_equal(numpy(out), numpy(layer.proxies))
    with pytest.raises(ValueError, match="do not match the proxies"):
        layer(np.zeros((5, DIM + 1), "float32"))


def test_layers_compute_in_float32_on_this_backend():
    rng = np.random.default_rng(6)
    maps = rng.uniform(0, 1, size=(2, 3, 3, 4)).astype("float32")
    gem = layers.GeneralizedMeanPooling(p=3.0)
    want = np.mean(np.maximum(maps, 1e-6) ** 3, axis=(1, 2)) ** (1 / 3)
    np.testing.assert_allclose(numpy(gem(maps)), want, rtol=1e-5)
    head = layers.EmbeddingHead(5, pooling="gem")
    out = numpy(head(maps))
    assert out.shape == (2, 5) and out.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(numpy(layers.L2Normalize()(np.zeros((1, 3), "float32"))), 0.0)
    x = rng.normal(size=(4, 3)).astype("float32")
    np.testing.assert_allclose(float(numpy(regularizers.LpNorm(0.5)(x))),
                               0.5 * np.linalg.norm(x, axis=1).sum(), rtol=1e-5)
    bn = layers.FusedBatchNormalization()
    normalised = numpy(bn(maps, training=True))
    np.testing.assert_allclose(normalised.mean(axis=(0, 1, 2)), 0.0, atol=1e-5)


def test_momentum_encoder_is_an_exponential_moving_average():
    weights = [keras.Variable(np.ones((2, 2), "float32")),
               keras.Variable(np.int32(3), trainable=False)]
    encoder = MomentumEncoder(momentum=0.9)
    encoder.track(weights)
    encoder.update(weights)  # the first update copies
    weights[0].assign(np.full((2, 2), 3.0, "float32"))
    encoder.update(weights)
    np.testing.assert_allclose(numpy(encoder.shadows[0]), 0.9 * 1.0 + 0.1 * 3.0, rtol=1e-6)
    assert int(numpy(encoder.shadows[1])) == 3


def test_a_loss_and_a_layer_round_trip_through_keras_serialization(tmp_path):
    loss = losses.CrossBatchMemory(losses.NCA(scale=4.0), memory_size=16, warmup_steps=2)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert again.get_config() == loss.get_config()
    combined = losses.Combined([losses.ArcFace(CLASSES), "keras_dml>NCA"], [1.0, 0.25])
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(combined))
    assert again.get_config() == combined.get_config()
    inputs = keras.Input((3, 3, 4))
    model = keras.Model(inputs, layers.EmbeddingHead(5, pooling="gem")(inputs))
    x = np.random.default_rng(7).uniform(size=(2, 3, 3, 4)).astype("float32")
    path = str(tmp_path / "head.keras")
    model.save(path)
    np.testing.assert_allclose(numpy(keras.saving.load_model(path)(x)), numpy(model(x)),
                               rtol=1e-6)


def _fitted(loss, x, y, batch_size, epochs=1):
    from keras_dml.models import DMLModel

    inputs = keras.Input((x.shape[1],))
    model = DMLModel(inputs, layers.EmbeddingHead(DIM)(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
    return model.fit(x, y, batch_size=batch_size, epochs=epochs, shuffle=False, verbose=0)


def test_dml_model_fit_steps_the_proxies_at_their_learning_rate_multiplier():
    x, steps = _embeddings(seed=8, n=16)[:, :5], {}
    y = np.repeat(np.arange(CLASSES), 4).astype("int32")
    for multiplier in (1.0, 10.0):
        keras.utils.set_random_seed(0)
        loss = losses.ProxyNCA(CLASSES, proxy_lr_multiplier=multiplier)
        loss.trainable_layer.build((None, DIM))
        before = numpy(loss.proxies)
        _fitted(loss, x, y, batch_size=16)
        steps[multiplier] = numpy(loss.proxies) - before
    assert np.abs(steps[1.0]).max() > 1e-3
    np.testing.assert_allclose(steps[10.0], 10.0 * steps[1.0], atol=1e-5)


def test_dml_model_fit_fills_the_memory_and_reports_combined_terms():
    x = _embeddings(seed=9, n=16)[:, :5]
    y = np.repeat(np.arange(CLASSES), 4).astype("int32")
    memory = losses.CrossBatchMemory(losses.NCA(scale=4.0), memory_size=16, momentum=0.9)
    history = _fitted(memory, x, y, batch_size=8)
    bank = memory.trainable_layer
    assert [int(numpy(v)) for v in (bank.filled, bank.next_slot, bank.steps)] == [16, 0, 2]
    np.testing.assert_array_equal(numpy(bank.labels), y)
    assert np.isfinite(history.history["loss"]).all()
    combined = losses.Combined([losses.NCA(scale=4.0), losses.ArcFace(CLASSES, scale=16.0)],
                               [1.0, 0.5])
    logs = {k: v[-1] for k, v in _fitted(combined, x, y, batch_size=16).history.items()}
    np.testing.assert_allclose(logs["loss"], logs["nca"] + 0.5 * logs["arcface"], rtol=1e-5)
