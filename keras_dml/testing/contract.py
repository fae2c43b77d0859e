"""The loss contract, one check per function, on the installed backend.

Each check takes a registry `Entry` (the class, a small instance's arguments and
what the loss claims: exact weights, labels, reference sets, row_local) and raises
an AssertionError naming the loss and what differs. keras_dml's tests run them over
every built-in (tests/test_losses_contract.py); `check_loss` runs them on any loss.
The batches are small (4 classes x 3, dimension 8): a check takes a second or so,
the fresh process of `save_load_in_a_fresh_process` some more.
"""

import json
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np

from keras_dml import backend, weighting
from keras_dml.backend import gradients

__all__ = ["CHECKS", "batch", "build", "config_round_trips",
           "degenerate_batches_are_finite", "make", "mixed_precision_is_float32",
           "modes_agree_and_weights_are_exact", "pair_weights_are_signed_derivatives",
           "reference_set_form_equals_the_batch_form", "row_local_against_a_reference_set",
           "save_load_in_a_fresh_process", "value_and_gradient"]

#: the degenerate label sets every loss must survive with a finite value and gradient
DEGENERATE_BATCHES = {
    "no_positives": np.arange(6),
    "one_class": np.zeros(6, int),
    "k1_and_pairs": np.array([0, 1, 2, 3, 3, 4]),
    "single_sample": np.array([7]),
}


def make(entry, **kwargs):
    """An instance of `entry`'s class from its example arguments and `kwargs`."""
    return entry.cls(**{**entry.example, **kwargs})


def batch(entry, seed=0, n=12, dim=8):
    """Labels (4 classes x 3, or continuous (N, 2)) and float32 embeddings."""
    rng = np.random.default_rng(seed)
    x = (0.7 * rng.normal(size=(n, dim))).astype("float32")
    if entry.labels == "continuous":
        return rng.normal(size=(n, 2)).astype("float32"), x
    return np.repeat(np.arange(4), n // 4).astype("int32"), x


def build(loss, x):
    """`loss` with its own weights (proxies) built for embeddings like `x`."""
    layer = getattr(loss, "trainable_layer", None)
    if layer is not None and not layer.built:
        layer.build((None, x.shape[-1]))
    return loss


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def modes():
    """The ways the installed backend runs a step: eager, and compiled ones."""
    name = backend.name()
    if name == "tensorflow":
        return ("eager", "graph", "xla")
    if name == "jax":
        return ("eager", "jit")
    return ("eager",)


def value_and_gradient(loss, labels, x, mode="eager"):
    """(loss value, d value / d x) as NumPy, eager or compiled (`modes`)."""
    def both(x):
        value, _, gradient = gradients.value_and_gradient(lambda x: (loss(labels, x), ()), x)
        return value, gradient

    if mode in ("graph", "xla"):
        import tensorflow as tf

        both = tf.function(both, jit_compile=mode == "xla")
    elif mode == "jit":
        import jax

        both = jax.jit(both)
    value, gradient = both(keras.ops.convert_to_tensor(x))
    return float(_numpy(value)), _numpy(gradient)


def _close(actual, expected, message, rtol=1e-5, atol=1e-6):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol, err_msg=message)


def modes_agree_and_weights_are_exact(entry):
    """Eager and compiled steps agree and are finite; W is finite, and (exact_weights)
    equal to the autodiff derivative of the value."""
    name = entry.cls.__name__
    labels, x = batch(entry)
    loss = build(make(entry), x)
    value, gradient = value_and_gradient(loss, labels, x)
    assert np.isfinite(value) and np.all(np.isfinite(gradient)), f"{name}: not finite"
    for mode in modes()[1:]:
        other_value, other_gradient = value_and_gradient(loss, labels, x, mode)
        _close(other_value, value, f"{name}: {mode} value differs from eager")
        _close(other_gradient, gradient, f"{name}: {mode} gradient differs from eager",
               rtol=1e-4, atol=1e-5)
    autodiff, weights = weighting.autodiff_weights(loss, labels, x)
    assert np.all(np.isfinite(weights)), f"{name}: W is not finite"
    if entry.exact_weights:
        _close(weights, autodiff, f"{name}: W is not d value / d matrix (autodiff)",
               atol=1e-6 * max(1.0, np.abs(autodiff).max()))


def pair_weights_are_signed_derivatives(entry):
    """`weighting.pair_weights`: finite, one row per query, 0 off the pairs, and (exact
    W) the derivative of the mean batch value with the unified view's sign."""
    name = entry.cls.__name__
    labels, x = batch(entry)
    loss = build(make(entry), x)
    weights = weighting.pair_weights(loss, labels, x)
    assert weights.shape[0] == len(x) and np.all(np.isfinite(weights)), name
    assert np.abs(weights).sum() > 0, f"{name}: every pair weight is 0"
    terms = loss.terms(labels, x)
    if terms.reference is not None and terms.reference.rows is not None:
        return  # keys drawn from the batch's rows: weights scattered back to (N, N)
    positive, negative = _numpy(terms.positive), _numpy(terms.negative)
    on_pairs = positive | negative
    assert np.all(weights[~on_pairs] == 0), f"{name}: a weight off the pairs"
    if entry.exact_weights:
        autodiff, _ = weighting.autodiff_weights(loss, labels, x)
        if np.ndim(_numpy(terms.value)) == 1:
            autodiff = autodiff / len(x)
        sign = np.where(positive, 1.0, -1.0)
        sign = sign if terms.is_distance else -sign
        # float32 round-off scales with the largest weight
        _close(weights[on_pairs], (sign * autodiff)[on_pairs],
               f"{name}: pair_weights are not the signed derivative",
               atol=1e-6 * max(1.0, np.abs(autodiff).max()))


def _keys_and_queries(loss, labels, x, keys, reference_for):
    """(value, query gradient, key gradient) of `loss` with keys `keys` given by
    `reference_for(keys)`: both sides differentiated at once through one input."""
    n = len(x)

    def value(both):
        return loss(labels, both[:n], reference=reference_for(both[n:])), ()

    total, _, gradient = gradients.value_and_gradient(
        value, keras.ops.convert_to_tensor(np.concatenate([x, keys])))
    gradient = _numpy(gradient)
    return float(_numpy(total)), gradient[:n], gradient[n:]


def reference_set_form_equals_the_batch_form(entry):
    """The batch as an explicit key set (own copies excluded) gives the batch form's
    value and gradient; a frozen key set gets no gradient."""
    from keras_dml.losses import Reference
    from keras_dml.losses.proxies import centre_major

    name = entry.cls.__name__
    if entry.reference == "batch":
        return  # its reference set is the batch only
    labels, x = batch(entry, seed=1)
    loss = build(make(entry), x)
    default, expected = value_and_gradient(loss, labels, x)
    if entry.reference == "proxies":
        keys = _numpy(centre_major(loss.trainable_layer.proxies, loss.num_classes,
                                   loss.proxies_per_class))
        key_labels = _numpy(loss.default_reference(labels, x).labels)

        def reference_for(k, trainable=True):
            return Reference(key_labels, k, trainable=trainable)
    else:
        keys, own = x, np.arange(len(x), dtype="int32")

        def reference_for(k, trainable=True):
            return Reference(labels, k, trainable=trainable, own=own)
    value, query_gradient, key_gradient = _keys_and_queries(
        loss, labels, x, keys, reference_for)
    _close(value, default, f"{name}: the batch as a reference set changes the value")
    if entry.reference != "proxies":  # the batch form's gradient is both sides' sum
        _close(query_gradient + key_gradient, expected,
               f"{name}: the batch as a reference set changes the gradient", rtol=1e-4)
    _, _, frozen = _keys_and_queries(loss, labels, x, keys,
                                     lambda k: reference_for(k, trainable=False))
    assert not np.any(frozen), f"{name}: a frozen reference set gets a gradient"


def row_local_against_a_reference_set(entry):
    """A row-local loss: query a's value against keys R equals its value as the only
    query of the batch [a; R]."""
    from keras_dml.losses import Reference

    if not entry.row_local or entry.reference != "any":
        return
    name = entry.cls.__name__
    labels, x = batch(entry, seed=2)
    key_labels, keys = batch(entry, seed=3, n=8)
    loss = make(entry, reduction="none")
    values = np.ravel(_numpy(loss(labels, x, reference=Reference(key_labels, keys))))
    for a in range(0, len(x), 5):
        alone = loss(np.concatenate([labels[a:a + 1], key_labels]),
                     np.concatenate([x[a:a + 1], keys]))
        _close(values[a] if values.size > 1 else values[0], np.ravel(_numpy(alone))[0],
               f"{name} claims row_local, but query {a} against a reference set differs "
               "from that query alone with it (register(row_local=False)?)")


def _settings(loss):
    """The constructor arguments kept as attributes of the same name."""
    import inspect

    return {key: getattr(loss, key) for key in inspect.signature(type(loss).__init__).parameters
            if key not in ("self", "name", "reduction", "dtype") and hasattr(loss, key)
            and not callable(getattr(loss, key))}


def config_round_trips(entry):
    """The config rebuilds the loss with every setting (none back to its default),
    and Keras' serialization, `keras.losses.get` and `keras_dml.losses.get` find it
    by its registered name."""
    from keras_dml import losses

    name = entry.cls.__name__
    loss = make(entry)
    config = loss.get_config()
    clone = type(loss).from_config(config)
    assert clone.get_config() == config, f"{name}: from_config(get_config()) differs"
    for key, value in _settings(loss).items():
        assert repr(getattr(clone, key)) == repr(value), (
            f"{name}: {key}={value!r} comes back as {getattr(clone, key)!r} from its config "
            "(add it to config_keys)")
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(restored) is type(loss) and restored.get_config() == config, name
    if not entry.example:  # built by its name with the defaults
        assert type(losses.get(entry.name)) is type(loss), entry.name
        assert type(keras.losses.get(entry.name)) is type(loss), entry.name


_LOAD_SCRIPT = """
import importlib, json, sys
sys.path[:0] = json.loads(sys.argv[1])
importlib.import_module(sys.argv[2])
import keras, numpy as np
model = keras.saving.load_model(sys.argv[3])
x = np.load(sys.argv[4])
print(json.dumps({"config": model.dml_loss.get_config(),
                  "embeddings": model.predict(x, verbose=0).tolist()}))
"""


def save_load_in_a_fresh_process(entry, directory=None):
    """A `DMLModel` compiled with the loss trains, saves to `.keras`, and a fresh
    Python process (importing only the loss's module) loads it with the same loss
    config and embeddings. The loss's class must live in an importable module."""
    from keras_dml.models import DMLModel

    name = entry.cls.__name__
    module = sys.modules.get(entry.cls.__module__)
    path = getattr(module, "__file__", None)
    assert path and entry.cls.__module__ != "__main__", (
        f"{name} is defined in {entry.cls.__module__}, which a fresh process cannot "
        "import: define the loss in a module of its own to check saving")
    labels, x = batch(entry)
    loss = make(entry)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((x.shape[1],))
    model = DMLModel(inputs, keras.layers.Dense(x.shape[1], name="embedding")(inputs))
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss=loss)
    model.fit(x, labels, batch_size=len(x), epochs=1, verbose=0, shuffle=False)
    with tempfile.TemporaryDirectory(dir=directory) as folder:
        saved, inputs_file = os.path.join(folder, "model.keras"), os.path.join(folder, "x.npy")
        model.save(saved)
        np.save(inputs_file, x)
        root = os.path.dirname(os.path.abspath(path))
        for _ in entry.cls.__module__.split(".")[1:]:  # the package's parent
            root = os.path.dirname(root)
        done = subprocess.run(
            [sys.executable, "-c", _LOAD_SCRIPT, json.dumps([root, *sys.path]),
             entry.cls.__module__, saved, inputs_file],
            capture_output=True, text=True, timeout=600,
            env={**os.environ, "KERAS_BACKEND": backend.name()})
    assert done.returncode == 0, (
        f"{name}: loading in a fresh process failed:\n{done.stderr[-2000:]}")
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    expected = json.loads(json.dumps(model.dml_loss.get_config()))
    assert loaded["config"] == expected, f"{name}: the loaded loss's config differs"
    _close(np.asarray(loaded["embeddings"]), model.predict(x, verbose=0),
           f"{name}: the loaded model embeds differently")


def degenerate_batches_are_finite(entry):
    """No positives, one class, singletons, one sample: a finite value and gradient."""
    name = entry.cls.__name__
    rng = np.random.default_rng(4)
    loss = make(entry)
    if entry.labels == "continuous":  # no classes: identical labels instead
        cases = {"identical_labels": np.zeros((5, 2), "float32")}
    else:
        cases = {key: labels.astype("int32") for key, labels in DEGENERATE_BATCHES.items()}
    for case, labels in cases.items():
        x = rng.normal(size=(len(labels), 8)).astype("float32")
        value, gradient = value_and_gradient(build(loss, x), labels, x)
        assert np.isfinite(value) and np.all(np.isfinite(gradient)), f"{name}: {case}"


def mixed_precision_is_float32(entry):
    """Under the mixed_float16 policy, float16 embeddings give a float32 value equal to
    the float32 value of the same (rounded) embeddings."""
    name = entry.cls.__name__
    labels, x = batch(entry)
    x = (0.5 * x).astype("float16")
    loss = build(make(entry), x)
    expected = float(_numpy(loss(labels, x.astype("float32"))))
    previous = keras.mixed_precision.global_policy()
    try:
        keras.mixed_precision.set_global_policy("mixed_float16")
        value = loss(labels, keras.ops.convert_to_tensor(x, "float16"))
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert keras.backend.standardize_dtype(value.dtype) == "float32", (
        f"{name}: {value.dtype} under mixed precision")
    _close(float(_numpy(value)), expected, f"{name}: mixed precision changes the value")


#: every check, in the order `check_loss` runs them (cheapest and most telling first)
CHECKS = {
    "weights": modes_agree_and_weights_are_exact,
    "pair_weights": pair_weights_are_signed_derivatives,
    "config": config_round_trips,
    "degenerate_batches": degenerate_batches_are_finite,
    "mixed_precision": mixed_precision_is_float32,
    "reference_set": reference_set_form_equals_the_batch_form,
    "row_local": row_local_against_a_reference_set,
    "save_load": save_load_in_a_fresh_process,
}
