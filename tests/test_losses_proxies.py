"""The ProxyLoss base (keras_dml/losses/proxies.py) through its four losses: gradients to
the proxies, the label range, degenerate batches, the (N, C) matrix, mixed precision,
the config, and the proxies trained, saved and resumed in DMLModel or a custom loop.
Each loss's values: test_losses_proxy_anchor.py, test_losses_proxy_nca.py,
test_losses_normalized_softmax.py, test_losses_soft_triple.py; the Proxies layer:
test_proxy_layers.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml.losses import NormalizedSoftmax, ProxyAnchor, ProxyNCA, Reference, SoftTriple
from keras_dml.losses.proxies import centre_major
from keras_dml.models import DMLModel
from proxy_checks import CLASSES, batch, with_proxies

LOSSES = [ProxyAnchor, ProxyNCA, NormalizedSoftmax, SoftTriple]


def test_custom_gradient_reaches_embeddings_and_proxies_like_autodiff():
    loss = ProxyAnchor(CLASSES)
    labels, x = batch(seed=5)
    proxies = with_proxies(loss)
    x_var = tf.Variable(x)
    with tf.GradientTape() as tape:
        value = loss(labels, x_var)
    grads = tape.gradient(value, [x_var, loss.proxies])

    # Plain autodiff of the same formula (no custom gradient).
    p_var = tf.Variable(proxies)
    with tf.GradientTape() as tape:
        s = tf.matmul(tf.math.l2_normalize(x_var, 1), tf.math.l2_normalize(p_var, 1),
                      transpose_b=True)
        pos = tf.one_hot(labels, CLASSES)
        h_pos = tf.reduce_sum(pos * tf.exp(-32.0 * (s - 0.1)), axis=0)
        h_neg = tf.reduce_sum((1 - pos) * tf.exp(32.0 * (s + 0.1)), axis=0)
        has = tf.reduce_sum(tf.cast(tf.reduce_sum(pos, 0) > 0, tf.float32))
        plain = tf.reduce_sum(tf.math.log1p(h_pos)) / has + tf.reduce_mean(tf.math.log1p(h_neg))
    expected = tape.gradient(plain, [x_var, p_var])
    np.testing.assert_allclose(float(value), float(plain), rtol=1e-5)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cls", LOSSES)
def test_labels_outside_the_classes_are_an_error(cls):
    loss = cls(CLASSES)
    labels, x = batch()
    labels[3] = CLASSES
    with pytest.raises(ValueError, match=r"\[0, 5\).*\[5\]"):
        loss(labels, x)
    with pytest.raises(ValueError, match=r"\[-1\]"):
        loss(np.where(labels == CLASSES, -1, labels), x)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"must lie in \[0, num_classes\)"):
        tf.function(loss)(labels, x)
    # XLA drops run-time assertions: the batch's loss is NaN, never a wrong proxy.
    assert np.isnan(float(tf.function(loss, jit_compile=True)(labels, x)))


@pytest.mark.parametrize("cls", LOSSES)
def test_degenerate_batches_are_finite(cls):
    loss = cls(CLASSES)
    for labels, x in [
        (np.zeros(6, "int32"), np.random.default_rng(0).normal(size=(6, 8)).astype("float32")),
        (np.array([2], "int32"), np.ones((1, 8), "float32")),
        (np.array([0, 1], "int32"), np.zeros((2, 8), "float32")),
    ]:
        x_var = tf.Variable(x)
        with tf.GradientTape() as tape:
            value = loss(labels, x_var)
        grads = tape.gradient(value, [x_var, loss.proxies])
        assert np.isfinite(float(value))
        assert all(np.all(np.isfinite(g)) for g in grads)


def test_many_classes_matrix_is_n_by_c():
    loss = ProxyAnchor(11318)
    labels = np.arange(180) // 2
    x = np.random.default_rng(0).normal(size=(180, 16)).astype("float32")
    terms = loss.terms(labels, x)
    assert terms.weights.shape == (180, 11318)
    assert np.isfinite(float(loss(labels, x)))


@pytest.mark.parametrize("cls", LOSSES)
def test_mixed_float16_matches_float32(cls):
    labels, x = batch(seed=7)
    loss32 = cls(CLASSES)
    proxies = with_proxies(loss32)
    expected = float(loss32(labels, x))
    policy = keras.config.dtype_policy()
    try:
        keras.mixed_precision.set_dtype_policy("mixed_float16")
        loss16 = cls(CLASSES)
        loss16.trainable_layer.build((None, 8))
        loss16.proxies.assign(proxies)
        assert loss16.proxies.dtype == "float32"
        value = loss16(labels, tf.constant(x, tf.float16))
    finally:
        keras.mixed_precision.set_dtype_policy(policy)
    assert value.dtype == tf.float32
    np.testing.assert_allclose(float(value), expected, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("loss", [
    ProxyAnchor(7, alpha=16.0, delta=0.2, proxy_lr_multiplier=100.0),
    ProxyNCA(7, scale=3.0),
    NormalizedSoftmax(7, temperature=0.1, proxy_initializer="glorot_uniform"),
    SoftTriple(7, centers_per_class=4, la=10.0, gamma=0.2, tau=0.1, margin=0.05),
])
def test_config_round_trip(loss):
    config = loss.get_config()
    clone = type(loss).from_config(config)
    assert clone.get_config() == config
    by_name = keras.losses.get({"class_name": f"keras_dml>{type(loss).__name__}",
                                "config": config})
    assert type(by_name) is type(loss) and by_name.get_config() == config
    layer = clone.trainable_layer
    assert (layer.num_classes, layer.proxies_per_class) == (7, loss.proxies_per_class)
    assert layer.learning_rate_multiplier == loss.trainable_layer.learning_rate_multiplier


# -- with DMLModel: trained, saved, restored, excluded from the embedder ---------------


def digits_batch():
    from sklearn.datasets import load_digits

    digits = load_digits()
    keep = np.concatenate([np.flatnonzero(digits.target == c)[:16] for c in range(10)])
    return (digits.data[keep] / 16.0).astype("float32"), digits.target[keep].astype("int32")


def dml_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((64,))
    hidden = keras.layers.Dense(64, activation="relu")(inputs)
    return DMLModel(inputs, keras.layers.Dense(16)(hidden))


@pytest.mark.slow
@pytest.mark.parametrize("make_loss", [
    lambda: ProxyAnchor(10, proxy_lr_multiplier=10.0),
    lambda: SoftTriple(10, centers_per_class=2),
])
def test_dml_model_trains_saves_and_resumes(make_loss, tmp_path):
    x, y = digits_batch()
    model = dml_model()
    loss = make_loss()
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=loss)
    proxies = loss.proxies
    assert any(w is proxies for w in model.trainable_weights)
    assert not any(w is proxies for w in model.embedder().trainable_weights)
    assert not any(w is proxies for w in keras.Model(model.inputs, model.outputs).weights)

    start = float(loss(y, model(x)))
    initial = proxies.numpy()
    model.fit(np.tile(x, (15, 1)), np.tile(y, 15), batch_size=len(x), shuffle=False, verbose=0)
    trained = float(loss(y, model(x)))
    assert trained < 0.8 * start
    assert not np.allclose(proxies.numpy(), initial)

    path = str(tmp_path / "proxies.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    restored_loss = restored.dml_loss
    assert restored_loss is not loss
    np.testing.assert_allclose(restored_loss.proxies.numpy(), proxies.numpy())
    np.testing.assert_allclose(float(restored_loss(y, restored(x))), trained, rtol=1e-5)
    assert any(w is restored_loss.proxies for w in restored.trainable_weights)

    # Weight checkpoints (ModelCheckpoint(save_weights_only=True)) carry the proxies too.
    weights_path = str(tmp_path / "proxies.weights.h5")
    model.save_weights(weights_path)
    fresh, fresh_loss = dml_model(seed=1), make_loss()
    fresh.compile(optimizer=keras.optimizers.Adam(1e-2), loss=fresh_loss)
    fresh.optimizer.build(fresh.trainable_variables)
    fresh.load_weights(weights_path)
    np.testing.assert_allclose(fresh_loss.proxies.numpy(), proxies.numpy())
    assert int(fresh.optimizer.iterations) == int(model.optimizer.iterations)

    # Training resumes from the saved state (optimizer included) and keeps improving.
    assert int(restored.optimizer.iterations) == int(model.optimizer.iterations)
    restored.fit(np.tile(x, (5, 1)), np.tile(y, 5), batch_size=len(x), shuffle=False, verbose=0)
    assert float(restored_loss(y, restored(x))) < trained


def test_learning_rate_multiplier_inside_dml_model_fit():
    x, y = digits_batch()
    deltas = []
    for multiplier in (1.0, 10.0):
        model = dml_model()
        loss = ProxyAnchor(10, proxy_lr_multiplier=multiplier,
                           proxy_initializer=keras.initializers.RandomNormal(seed=3))
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss)
        before = model.get_weights()
        proxies_before = loss.proxies.numpy()
        model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
        deltas.append(loss.proxies.numpy() - proxies_before)
        network = [w.numpy() - b for w, b in zip(model.weights, before)
                   if w is not loss.proxies and w is not loss.trainable_layer.step_origin]
        deltas.append(network)
    (proxy_1, network_1), (proxy_10, network_10) = deltas[:2], deltas[2:]
    assert np.abs(proxy_1).max() > 0
    np.testing.assert_allclose(proxy_10, 10.0 * proxy_1, rtol=1e-3, atol=1e-8)
    for a, b in zip(network_1, network_10):  # the network's own step is unchanged
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_proxies_train_in_a_custom_loop_that_adds_them_and_stay_fixed_in_a_plain_model():
    """The documented contract: DMLModel (tests/test_models.py) or a loop that adds
    `loss.trainable_layer`'s weights trains the proxies; a plain keras.Model does not,
    and tracing the loss outside DMLModel warns nothing."""
    import warnings

    labels, x = batch(n=10, dim=4)
    inputs = keras.Input((4,))
    plain = keras.Model(inputs, keras.layers.Dense(3)(inputs))
    loss = ProxyAnchor(num_classes=CLASSES)
    plain.compile("adam", loss)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain.fit(x, labels, batch_size=10, epochs=1, verbose=0)
    start = loss.proxies.numpy().copy()
    plain.fit(x, labels, batch_size=10, epochs=1, verbose=0)
    np.testing.assert_array_equal(loss.proxies.numpy(), start)

    loss = ProxyAnchor(num_classes=CLASSES)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    loss.trainable_layer.build((None, 3))
    start = loss.proxies.numpy().copy()
    variables = model.trainable_weights + loss.trainable_layer.trainable_weights
    optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            value = loss(labels, model(x))
        optimizer.apply(tape.gradient(value, variables), variables)

    with warnings.catch_warnings(record=True) as more:
        warnings.simplefilter("always")
        step()
    assert np.abs(loss.proxies.numpy() - start).max() > 1e-4
    assert not [w for w in caught + more if "prox" in str(w.message).lower()]


@pytest.mark.parametrize("cls", LOSSES)
def test_a_training_step_builds_no_sample_by_proxy_mask(cls):
    # the proxy losses read pairs.labels: a (N, C K) bool mask would be wasted passes
    loss = cls(CLASSES)
    labels, x = batch(seed=3)
    with_proxies(loss)
    x_var = tf.Variable(x)

    @tf.function
    def step(y):
        with tf.GradientTape() as tape:
            value = loss(y, x_var)
        return tape.gradient(value, [x_var, loss.proxies])

    graph = step.get_concrete_function(tf.constant(labels)).graph
    columns = loss.proxies.shape[0]
    masks = [op.name for op in graph.get_operations() for out in op.outputs
             if out.dtype == tf.bool and out.shape.as_list() == [len(labels), columns]]
    assert masks == []
    # the masks still come with the engine's terms, for weighting.pair_weights
    terms = loss.terms(labels, x)
    assert terms.positive.shape == (len(labels), columns)


def test_centre_major_moves_proxy_k_of_class_c_to_row_k_c_plus_c():
    proxies = np.arange(6 * 2, dtype="float32").reshape(6, 2)  # C = 3, K = 2, class-major
    keys = centre_major(tf.constant(proxies), num_classes=3, proxies_per_class=2).numpy()
    np.testing.assert_array_equal(keys, proxies[[0, 2, 4, 1, 3, 5]])
    np.testing.assert_array_equal(centre_major(proxies, 3, 1), proxies)


def test_a_reference_in_another_layout_is_an_error():
    # the terms read the centre-major layout, not the key labels: class-major keys would
    # pair samples with wrong centres silently
    loss = SoftTriple(CLASSES, centers_per_class=2)
    labels, x = batch(seed=4)
    proxies = with_proxies(loss)
    class_major = Reference(np.repeat(np.arange(CLASSES), 2), tf.constant(proxies),
                            trainable=True)
    with pytest.raises(ValueError, match=r"centre-major class ids, arange\(10\) % 5"):
        loss(labels, x, reference=class_major)
    with pytest.raises(ValueError, match="got 5 keys"):
        loss(labels, x, reference=Reference(np.arange(CLASSES), proxies[:CLASSES]))

    @tf.function
    def in_graph(key_labels, keys):
        return loss(labels, x, reference=Reference(key_labels, keys))

    with pytest.raises(tf.errors.InvalidArgumentError, match="centre-major"):
        in_graph(tf.constant(np.repeat(np.arange(CLASSES), 2)), tf.constant(proxies))
    keys = centre_major(tf.constant(proxies), CLASSES, 2)
    value = in_graph(tf.constant(np.arange(2 * CLASSES) % CLASSES), keys)
    np.testing.assert_allclose(float(value), float(loss(labels, x)), rtol=1e-6)
