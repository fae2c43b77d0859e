"""The engine's row blocks (keras_dml/losses/row_blocks.py): a loss that opts in gives
the same value and gradient a block of query rows at a time as from the whole matrix,
with the weights kept or computed again, for the batch and for explicit key sets."""

import numpy as np
import pytest
import tensorflow as tf

from keras_dml import losses, mining
from keras_dml.losses import Reference, row_block_limits, row_blocks
from keras_dml.losses.registry import ENTRIES

ROW_NAMES = sorted(name for name, entry in ENTRIES.items()
                   if getattr(entry.cls, "row_blocks", False))


def _make(name, **kwargs):
    return ENTRIES[name].cls(**{**ENTRIES[name].example, **kwargs})


def _data(seed=0, n=12, m=10, dim=8):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(4), n // 4).astype("int32")
    keys = (0.7 * rng.normal(size=(m, dim))).astype("float32")
    key_labels = rng.integers(0, 4, size=m).astype("int32")
    key_labels[-1] = -1  # an empty slot: no pair
    return labels, (0.7 * rng.normal(size=(n, dim))).astype("float32"), key_labels, keys


def _value_and_gradients(loss, labels, x, reference_of=None, function=False):
    """Loss value and gradients w.r.t. x (and the keys, for a trainable reference)."""
    def step(x, keys):
        with tf.GradientTape() as tape:
            tape.watch([x, keys])
            reference = None if reference_of is None else reference_of(keys)
            value = loss(labels, x, reference=reference)
        return [value, *tape.gradient(value, [x, keys],
                                      unconnected_gradients=tf.UnconnectedGradients.ZERO)]

    keys = tf.constant(_data()[3])
    if function:
        step = tf.function(step, input_signature=[tf.TensorSpec([None, x.shape[1]]),
                                                  tf.TensorSpec([None, x.shape[1]])])
    return [t.numpy() for t in step(tf.constant(x), keys)]


@pytest.fixture
def blocks(monkeypatch):
    """Row blocks for anything above 8 entries, 5 rows of 12 keys per block; returns
    a list that records every blocked call."""
    calls = []
    blocked = row_blocks.row_blocked_values

    def recorded(*args):
        calls.append(args[0])
        return blocked(*args)

    def use(stored, xla=False):
        monkeypatch.setattr(row_block_limits, "ROW_BLOCKS_ABOVE_ENTRIES", 8)
        monkeypatch.setattr(row_block_limits, "BLOCK_ENTRIES", 5 * 12)
        monkeypatch.setattr(row_block_limits, "XLA_BLOCKS_FROM_ENTRIES", 0 if xla else 2 ** 62)
        monkeypatch.setattr(row_block_limits, "STORED_WEIGHTS_MAX_ENTRIES",
                            2 ** 30 if stored else 8)
        monkeypatch.setattr(row_blocks, "row_blocked_values", recorded)
        return calls

    return use


def test_losses_that_opt_in_are_row_local():
    assert {"MultiSimilarity", "InstanceCrossEntropy"} <= set(ROW_NAMES)
    assert all(ENTRIES[name].row_local for name in ROW_NAMES)


@pytest.mark.slow
@pytest.mark.parametrize("function, stored, xla",
                         [(False, True, False), (True, True, False), (True, False, False),
                          (True, True, True)],
                         ids=["eager", "tf.function", "tf.function, recomputed",
                              "tf.function, XLA terms"])
@pytest.mark.parametrize("name", ROW_NAMES)
def test_row_blocks_equal_the_whole_matrix_on_the_batch(name, function, stored, xla, blocks):
    labels, x, _, _ = _data()
    whole = _value_and_gradients(_make(name), labels, x, function=function)
    calls = blocks(stored, xla)
    blocked = _value_and_gradients(_make(name), labels, x, function=function)
    assert calls, "the row blocks were not used"
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("trainable", [False, True], ids=["memory", "trainable keys"])
@pytest.mark.parametrize("stored", [True, False], ids=["weights kept", "recomputed"])
@pytest.mark.parametrize("name", [n for n in ROW_NAMES if ENTRIES[n].reference == "any"])
def test_row_blocks_equal_the_whole_matrix_against_a_key_set(name, stored, trainable,
                                                            blocks):
    labels, x, key_labels, _ = _data()

    def reference_of(keys):
        return Reference(tf.constant(key_labels), keys, trainable=trainable)

    whole = _value_and_gradients(_make(name), labels, x, reference_of, function=True)
    calls = blocks(stored)
    blocked = _value_and_gradients(_make(name), labels, x, reference_of, function=True)
    assert calls, "the row blocks were not used"
    assert np.any(whole[2] != 0) == trainable  # the keys' gradient only when trainable
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("miner", ["MultiSimilarityMiner", "SemiHardMiner", "HardMiner",
                                   "EasyMiner", "PairMarginMiner"])
def test_row_local_miners_mine_each_block_as_the_whole_matrix(miner, blocks):
    labels, x, _, _ = _data()
    whole = _value_and_gradients(losses.Contrastive(miner=miner), labels, x)
    calls = blocks(stored=True)
    blocked = _value_and_gradients(losses.Contrastive(miner=miner), labels, x)
    assert calls and np.any(whole[1] != 0)
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_distances_and_non_local_miners(blocks):
    """On Euclidean distances the backward pass computes the blocks again; a miner
    that is not row-local (it samples over the whole matrix) keeps the whole path."""
    labels, x, _, _ = _data()
    loss = losses.MultiSimilarity(metric="euclidean")
    whole = _value_and_gradients(loss, labels, x)
    calls = blocks(stored=True)
    blocked = _value_and_gradients(loss, labels, x)
    assert len(calls) == 1
    for a, b in zip(whole, blocked):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    sampled = losses.MultiSimilarity(miner=mining.DistanceWeighted(seed=0))
    assert not row_blocks.applies(sampled, Reference.batch(labels, x))
    _value_and_gradients(sampled, labels, x)
    assert len(calls) == 1


def test_whole_step_under_xla_keeps_the_whole_matrix(blocks):
    labels, x, _, _ = _data()
    loss = losses.MultiSimilarity()
    calls = blocks(stored=True)
    value = tf.function(lambda x: loss(labels, x), jit_compile=True)(tf.constant(x))
    assert not calls and np.isfinite(float(value))
