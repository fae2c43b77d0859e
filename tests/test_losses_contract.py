"""The loss contract, checked on every registered loss (`keras_dml.losses.registry.ENTRIES`).

The checks are `keras_dml.testing.contract`'s, which `keras_dml.testing.check_loss`
runs on a user's loss. A loss added with `@register(...)` is tested here without
touching this file: its entry gives the constructor arguments of a small instance,
whether W is exact, its kind of labels and whether it takes an explicit reference
set. The values against the papers' NumPy loops are in each loss's own test file
(tests/reference.py). The last test checks the package's exports.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from keras_dml.losses.registry import ENTRIES
from keras_dml.models import DMLModel
from keras_dml.testing import contract

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
    return contract.make(ENTRIES[name], **kwargs)


def _batch(name, seed=0, n=12, dim=8):
    return contract.batch(ENTRIES[name], seed, n, dim)


_built = contract.build


@pytest.mark.parametrize("name", _tiered(NAMES))
def test_modes_agree_and_weights_are_exact(name):
    contract.modes_agree_and_weights_are_exact(ENTRIES[name])


@pytest.mark.parametrize("name", NAMES)
def test_pair_weights_are_the_signed_derivative_on_pairs_only(name):
    contract.pair_weights_are_signed_derivatives(ENTRIES[name])


@pytest.mark.parametrize("name", _tiered(NAMES, explicit_reference=True))
def test_reference_set_form_equals_the_batch_form(name):
    contract.reference_set_form_equals_the_batch_form(ENTRIES[name])


@pytest.mark.parametrize("name", _tiered([n for n in NAMES if ENTRIES[n].row_local
                                          and ENTRIES[n].reference == "any"]))
def test_each_query_against_a_reference_set_is_that_query_alone_with_it(name):
    contract.row_local_against_a_reference_set(ENTRIES[name])


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trips(name):
    """Every loss, in the quick tier: its config rebuilds it with every setting, and
    Keras' serialization and `keras.losses.get` find it by its registered name."""
    contract.config_round_trips(ENTRIES[name])


@pytest.mark.slow  # a fresh Python process per loss
@pytest.mark.parametrize("name", NAMES)
def test_saved_model_loads_in_a_fresh_process(name, tmp_path):
    contract.save_load_in_a_fresh_process(ENTRIES[name], str(tmp_path))


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
    contract.degenerate_batches_are_finite(ENTRIES[name])


@pytest.mark.parametrize("name", NAMES)  # every loss, in the quick tier: a few ms each
def test_mixed_precision_is_float32(name):
    contract.mixed_precision_is_float32(ENTRIES[name])


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
