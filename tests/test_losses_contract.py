"""The loss contract, checked on every registered loss (`keras_dml.losses.registry.ENTRIES`).

A loss added with `@register(...)` is tested here without touching this file: its
entry gives the constructor arguments of a small instance, whether W is exact, its
kind of labels and whether it takes an explicit reference set. The values against
the papers' NumPy loops are in each loss's own test file (tests/reference.py). The
last test checks the package's exports.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
import loss_checks as checks
from keras_dml import weighting
from keras_dml.losses import Reference
from keras_dml.losses.proxies import centre_major
from keras_dml.losses.registry import ENTRIES
from keras_dml.models import DMLModel

NAMES = sorted(ENTRIES)

#: The quick tier's slice of every check: a pair loss, a proxy loss and a loss of
#: continuous labels (`pytest -q`); `--full` runs each check on every registered loss.
QUICK = ("MultiSimilarity", "ArcFace", "LogRatio")


def _tiered(names, explicit_reference=False):
    """`names` as parameters: those in `QUICK` in the quick tier, the rest marked slow;
    with `explicit_reference`, a loss whose reference set is the batch only is a visible
    skip (it takes no explicit reference set to compare with the batch form)."""
    assert set(QUICK) & set(names), "the quick tier keeps a slice of every check"
    params = []
    for name in names:
        marks = [] if name in QUICK else [pytest.mark.slow]
        if explicit_reference and ENTRIES[name].reference == "batch":
            marks.append(pytest.mark.skip(reason=f"{name}'s reference set is the batch only"))
        params.append(pytest.param(name, marks=marks))
    return params


def _make(name, **kwargs):
    entry = ENTRIES[name]
    return entry.cls(**{**entry.example, **kwargs})


def _batch(name, seed=0, n=12, dim=8):
    """Labels (4 classes x 3, or continuous (N, 2)) and embeddings for the loss `name`."""
    rng = np.random.default_rng(seed)
    x = (0.7 * rng.normal(size=(n, dim))).astype("float32")
    if ENTRIES[name].labels == "continuous":
        return rng.normal(size=(n, 2)).astype("float32"), x
    return np.repeat(np.arange(4), n // 4).astype("int32"), x


def _built(loss, x):
    """Build a loss's own weights (proxies, beta) before comparing calls."""
    layer = getattr(loss, "trainable_layer", None)
    if layer is not None and not layer.built:
        layer.build((None, x.shape[-1]))
    return loss


@pytest.mark.parametrize("name", _tiered(NAMES))
def test_modes_agree_and_weights_are_exact(name):
    labels, x = _batch(name)
    loss = _built(_make(name), x)
    checks.assert_modes_agree(loss, labels, x)  # eager, tf.function, jit_compile=True
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    assert np.all(np.isfinite(weights))
    if ENTRIES[name].exact_weights:
        np.testing.assert_allclose(weights, autodiff, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_pair_weights_are_the_signed_derivative_on_pairs_only(name):
    """`weighting.pair_weights` works for every loss: finite, one row per query, zero
    off the positive and negative pairs, and (for exact W) the derivative of the mean
    batch value with the sign of the unified view (>= 0 where the loss pulls/pushes)."""
    labels, x = _batch(name)
    loss = _built(_make(name), x)
    weights = weighting.pair_weights(loss, labels, x)
    assert weights.shape[0] == len(x) and np.all(np.isfinite(weights))
    assert np.abs(weights).sum() > 0
    terms = loss.terms(labels, x)
    if terms.reference is None or terms.reference.rows is None:  # keys not drawn from rows
        on_pairs = np.asarray(terms.positive) | np.asarray(terms.negative)
        assert np.all(weights[~on_pairs] == 0)
        if ENTRIES[name].exact_weights:
            autodiff, _ = weighting.autodiff_weights(loss, labels, x)
            if np.ndim(terms.value) == 1:
                autodiff = autodiff / len(x)
            sign = np.where(np.asarray(terms.positive), 1.0, -1.0)
            sign = sign if terms.is_distance else -sign
            # float32 round-off scales with the largest weight (SoftTriple's reach 1.65:
            # a 3.6e-7 difference at a 5e-3 entry failed atol=1e-7 with other proxies)
            np.testing.assert_allclose(weights[on_pairs], (sign * autodiff)[on_pairs],
                                       rtol=1e-5, atol=1e-6 * max(1.0, np.abs(autodiff).max()))


@pytest.mark.parametrize("name", _tiered(NAMES, explicit_reference=True))
def test_reference_set_form_equals_the_batch_form(name):
    """The batch as an explicit key set (own copies excluded) gives the same value and
    gradient as the default in-batch form; a frozen key set gets no gradient."""
    entry = ENTRIES[name]
    labels, x = _batch(name, seed=1)
    loss = _built(_make(name), x)
    if entry.reference == "proxies":
        keys = tf.Variable(centre_major(loss.trainable_layer.proxies, loss.num_classes,
                                        loss.proxies_per_class))
        reference = Reference(loss.default_reference(labels, x).labels, keys, trainable=True)
    else:
        keys = tf.Variable(x)
        reference = Reference(labels, keys, trainable=True, own=tf.range(len(x)))
    embeddings = tf.Variable(x)
    with tf.GradientTape() as tape:
        default = loss(labels, embeddings)
    expected = tape.gradient(default, embeddings)
    with tf.GradientTape(persistent=True) as tape:
        value = loss(labels, embeddings, reference=reference)
    np.testing.assert_allclose(float(value), float(default), rtol=1e-5, atol=1e-6)
    query_gradient, key_gradient = tape.gradient(value, [embeddings, keys])
    if entry.reference != "proxies":  # the batch form's gradient is both sides' sum
        np.testing.assert_allclose(query_gradient + key_gradient, expected, rtol=1e-4,
                                   atol=1e-6)
    frozen = reference._replace(trainable=False)
    with tf.GradientTape() as tape:
        value = loss(labels, embeddings, reference=frozen)
    assert tape.gradient(value, keys) is None


@pytest.mark.parametrize("name", _tiered([n for n in NAMES if ENTRIES[n].row_local
                                          and ENTRIES[n].reference == "any"]))
def test_each_query_against_a_reference_set_is_that_query_alone_with_it(name):
    """Row-local losses: query a's value against keys R equals its value as the only
    query of the batch [a; R] (the rectangular matrix is row a of the square one)."""
    labels, x = _batch(name, seed=2)
    keys_labels, keys = _batch(name, seed=3, n=8)
    loss = _make(name, reduction="none")
    values = loss(labels, x, reference=Reference(keys_labels, keys))
    for a in range(0, len(x), 5):
        alone = loss(np.concatenate([labels[a:a + 1], keys_labels]),
                     np.concatenate([x[a:a + 1], keys]))
        np.testing.assert_allclose(np.ravel(values)[a] if np.ndim(values) else float(values),
                                   np.ravel(alone)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trips(name):
    """Every loss, in the quick tier: its config rebuilds it, and Keras' serialization
    finds it by its registered name."""
    loss = _make(name)
    config = loss.get_config()
    assert type(loss).from_config(config).get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == config


@pytest.mark.parametrize("name", _tiered(NAMES))
def test_compile_by_name_and_evaluate(name):
    labels, x = _batch(name)
    loss = _make(name)
    inputs = keras.Input((x.shape[1],))
    model = DMLModel(inputs, keras.layers.Dense(x.shape[1])(inputs))
    identifier = f"keras_dml>{name}" if not ENTRIES[name].example else loss
    model.compile(optimizer="sgd", loss=identifier)
    assert type(model.dml_loss) is type(loss)
    assert np.isfinite(model.evaluate(x, labels, batch_size=len(x), verbose=0))


@pytest.mark.parametrize("name", _tiered(NAMES))
def test_degenerate_batches_are_finite(name):
    if ENTRIES[name].labels == "continuous":  # no classes: identical labels instead
        x = np.random.default_rng(4).normal(size=(5, 8)).astype("float32")
        value, gradient = checks.value_and_gradient(_make(name), np.zeros((5, 2), "f"), x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient))
        return
    checks.assert_degenerate_finite(_make(name), modes=("eager",))


@pytest.mark.parametrize("name", NAMES)  # every loss, in the quick tier: a few ms each
def test_mixed_precision_is_float32(name):
    labels, x = _batch(name)
    x = 0.5 * x
    loss = _built(_make(name), x)
    expected = float(loss(labels, tf.cast(tf.cast(x, tf.float16), tf.float32)))
    previous = keras.mixed_precision.global_policy()
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        value = loss(labels, tf.cast(x, tf.float16))
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert value.dtype == tf.float32
    np.testing.assert_allclose(float(value), expected, rtol=1e-5, atol=1e-6)


# -- the package's exports ------------------------------------------------------------


XLA_NAMES = [name for name in NAMES if _make(name).xla_terms]


@pytest.mark.parametrize("name", _tiered(XLA_NAMES))
def test_xla_terms_equal_the_graph_terms_on_both_sides_of_the_size_limit(name, monkeypatch):
    """A loss that opts in to `xla_terms` runs them under XLA up to
    `XLA_TERMS_MAX_ENTRIES` matrix entries and in TensorFlow's graph beyond: same
    value and gradient, with a static shape (chosen when traced) or an unknown one
    (chosen at run time)."""
    from keras_dml.losses import base

    y, x = _batch(name)
    x = tf.constant(x)

    def value_and_gradient(loss, function):
        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                value = loss(y, x)
            return value, tape.gradient(value, x)

        if function:
            step = tf.function(step, input_signature=[tf.TensorSpec([None, x.shape[1]])])
        return [t.numpy() for t in step(x)]

    for function in (False, True):
        loss = _built(_make(name), x)
        fused = value_and_gradient(loss, function)
        monkeypatch.setattr(base, "XLA_TERMS_MAX_ENTRIES", 8)  # the batch's 144 exceed it
        graph = value_and_gradient(loss, function)
        monkeypatch.undo()
        for a, b in zip(fused, graph):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_losses_are_exported():
    for name in ("Contrastive", "Triplet", "LiftedStructure", "GeneralizedLiftedStructure",
                 "BinomialDeviance", "BinLifted", "RelativeAbsoluteWeighting"):
        assert hasattr(keras_dml.losses, name)
