"""Miners: hand-built batches with known kept pairs, NumPy loops, modes and serialization."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import mining, ops
from keras_dml.losses import Contrastive, Triplet

import reference as ref


def _angles_batch():
    """Unit vectors in the plane; anchor 0 at 0 degrees.

    Row 0 similarities: positives 1 (10 deg, 0.985), 2 (40 deg, 0.766); negatives
    3 (20 deg, 0.940), 4 (60 deg, 0.5), 5 (90 deg, 0.0).
    """
    degrees = np.array([0.0, 10.0, 40.0, 20.0, 60.0, 90.0])
    x = np.stack([np.cos(np.radians(degrees)), np.sin(np.radians(degrees))], 1)
    return np.array([0, 0, 0, 1, 1, 2], "int32"), x.astype("float32")


def _mine(miner, labels, x):
    similarity = ops.pairwise(x)
    positive, negative = ops.label_masks(tf.constant(labels))
    kept_positive, kept_negative = miner(similarity, positive, negative)
    return np.asarray(kept_positive), np.asarray(kept_negative)


def _row(mask, i=0):
    return set(np.flatnonzero(mask[i]).tolist())


@pytest.mark.parametrize("miner,positives,negatives", [
    (mining.SemiHardMiner(), {1, 2}, {3, 4}),
    (mining.SemiHardMiner(margin=0.1), {1}, {3}),
    (mining.HardMiner(), {2}, {3}),
    (mining.HardMiner(margin=0.1), {2}, {3}),
    (mining.EasyMiner(), {1}, {3}),
    (mining.PairMarginMiner(pos_margin=0.9, neg_margin=0.3), {2}, {3, 4}),
    (mining.PairMarginMiner(pos_margin=0.99, neg_margin=0.95), {1, 2}, set()),
    (mining.MultiSimilarityMiner(0.1), {1, 2}, {3}),
    (mining.MultiSimilarityMiner(0.3), {1, 2}, {3, 4}),
    (mining.MultiSimilarityMiner(-0.1), {2}, {3}),
], ids=["semihard", "semihard_margin", "hard", "hard_margin", "easy", "pair_margin",
        "pair_margin_strict", "vthm", "vthm_wide", "vthm_negative_eps"])
def test_hand_built_batch_keeps_the_known_pairs(miner, positives, negatives):
    labels, x = _angles_batch()
    kept_positive, kept_negative = _mine(miner, labels, x)
    assert _row(kept_positive) == positives
    assert _row(kept_negative) == negatives


def test_semihard_selection_names_the_negative_of_each_positive():
    labels, x = _angles_batch()
    similarity = ops.pairwise(x)
    positive, negative = ops.label_masks(tf.constant(labels))
    valid, index = mining.SemiHardMiner().select(similarity, positive, negative)
    valid, index = np.asarray(valid), np.asarray(index)
    assert valid[0, 1] and index[0, 1] == 3  # 20 deg: the closest negative beyond 10 deg
    assert valid[0, 2] and index[0, 2] == 4  # 60 deg: the closest negative beyond 40 deg
    # anchor 2 (40 deg): positive 1 (30 deg away) has negatives 4 (20 deg away, closer)
    # and 5 (50 deg away, farther): semi-hard picks 5
    assert valid[2, 1] and index[2, 1] == 5


def _triplet_sets(valid, index):
    return {(a, p, int(index[a, p])) for a, p in zip(*np.nonzero(valid))}


@pytest.mark.parametrize("name", ["semihard", "hard", "easy"])
@pytest.mark.parametrize("seed", [0, 1])
def test_triplet_miners_match_numpy_loops(name, seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 5, size=16).astype("int32")
    x = rng.normal(size=(16, 6)).astype("float32")
    miner = mining.triplet.TRIPLET_MINERS[name]()
    similarity = ops.pairwise(x)
    positive, negative = ops.label_masks(tf.constant(labels))
    valid, index = miner.select(similarity, positive, negative)
    assert _triplet_sets(np.asarray(valid), np.asarray(index)) == set(
        ref.triplets(x, labels, mining=name))
    kept_positive, kept_negative = _mine(miner, labels, x)
    expected = ref.triplets(x, labels, mining=name)
    assert set(zip(*np.nonzero(kept_positive))) == {(a, p) for a, p, _ in expected}
    assert set(zip(*np.nonzero(kept_negative))) == {(a, n) for a, _, n in expected}


@pytest.mark.parametrize("seed", [0, 1])
def test_pair_margin_and_vthm_match_numpy_loops(seed):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=14).astype("int32")
    x = rng.normal(size=(14, 3)).astype("float32")
    kept = _mine(mining.PairMarginMiner(0.4, 0.1), labels, x)
    expected = ref.pair_margin(x, labels, 0.4, 0.1)
    np.testing.assert_array_equal(kept[0], expected[0])
    np.testing.assert_array_equal(kept[1], expected[1])
    kept_positive, kept_negative = _mine(mining.MultiSimilarityMiner(0.2), labels, x)
    for i, (positives, negatives) in enumerate(ref.vthm(x, labels, 0.2)):
        assert _row(kept_positive, i) == set(positives)
        assert _row(kept_negative, i) == set(negatives)


def test_miners_on_distance_losses_see_negated_distances():
    """With a Euclidean loss, semi-hard means the closest negative beyond the positive."""
    labels, x = _angles_batch()
    loss = Contrastive(metric="euclidean", neg_margin=10.0, miner=mining.SemiHardMiner())
    terms = loss.terms(labels, x)
    # on unit vectors the distance order equals the cosine order
    assert _row(np.asarray(terms.positive)) == {1, 2}
    assert _row(np.asarray(terms.negative)) == {3, 4}


@pytest.mark.parametrize("labels", [np.arange(6), np.zeros(6), np.array([0, 1])],
                         ids=["singletons", "one_class", "two_singletons"])
@pytest.mark.parametrize("name", ["semihard", "hard", "easy"])
def test_degenerate_batches_keep_nothing(labels, name):
    labels = labels.astype("int32")
    x = np.random.default_rng(3).normal(size=(len(labels), 4)).astype("float32")
    kept_positive, kept_negative = _mine(mining.triplet.TRIPLET_MINERS[name](), labels, x)
    assert not kept_positive.any() and not kept_negative.any()


@pytest.mark.parametrize("miner", [mining.SemiHardMiner(0.2), mining.HardMiner(),
                                   mining.EasyMiner(), mining.PairMarginMiner(0.5, 0.2)],
                         ids=["semihard", "hard", "easy", "pair_margin"])
def test_eager_function_and_jit_agree_and_no_gradient(miner):
    labels, x = _angles_batch()
    eager = _mine(miner, labels, x)
    for wrap in (tf.function, lambda f: tf.function(f, jit_compile=True)):
        mined = wrap(lambda s, p, n: miner(s, p, n))(
            ops.pairwise(x), *ops.label_masks(tf.constant(labels)))
        np.testing.assert_array_equal(np.asarray(mined[0]), eager[0])
        np.testing.assert_array_equal(np.asarray(mined[1]), eager[1])
    similarity = tf.Variable(ops.pairwise(x))
    with tf.GradientTape() as tape:
        kept, _ = miner(similarity, *ops.label_masks(tf.constant(labels)))
        total = tf.reduce_sum(tf.cast(kept, tf.float32) * similarity)
    # the masks carry no gradient: only the explicit product does
    np.testing.assert_array_equal(tape.gradient(total, similarity), np.asarray(kept, "float32"))


@pytest.mark.parametrize("miner", [mining.SemiHardMiner(0.2), mining.HardMiner(),
                                   mining.EasyMiner(margin=0.3), mining.PairMarginMiner(0.7, 0.1)],
                         ids=["semihard", "hard", "easy", "pair_margin"])
def test_miner_serialization_round_trip(miner):
    config = keras.saving.serialize_keras_object(miner)
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is type(miner) and restored.get_config() == miner.get_config()
    assert mining.get(config).get_config() == miner.get_config()
    assert repr(restored) == repr(miner)
    loss = Triplet(miner=miner) if isinstance(miner, mining.TripletMiner) else Contrastive(
        miner=miner)
    clone = type(loss).from_config(loss.get_config())
    assert clone.miner.get_config() == miner.get_config()


def test_semihard_is_quadratic_in_memory():
    """The traced miner holds nothing larger than (N, N, 2)."""
    n = 40
    miner = mining.SemiHardMiner()

    @tf.function
    def run(similarity, positive, negative):
        return miner(similarity, positive, negative)

    spec = [tf.TensorSpec((n, n), tf.float32), tf.TensorSpec((n, n), tf.bool),
            tf.TensorSpec((n, n), tf.bool)]
    graph = run.get_concrete_function(*spec).graph
    sizes = [out.shape.num_elements() for op in graph.get_operations() for out in op.outputs
             if out.shape.is_fully_defined()]
    assert max(sizes) <= 2 * n * n


class _Records(list):
    """A logging handler that keeps the messages it sees."""

    level = 0

    def handle(self, record):
        self.append(record.getMessage())


@pytest.mark.parametrize("name", ["SemiHardMiner", "MultiSimilarityMiner", "PairMarginMiner",
                                  "DistanceWeighted"])
def test_a_loss_with_a_miner_in_tf_function_logs_no_autograph_warning(name):
    """AutoGraph converts every method the engine calls on a miner (an empty-bodied
    method cannot be converted: TensorFlow then logs "could not transform")."""
    for method in ("bind_dimension", "mine"):
        tf.autograph.to_graph(getattr(type(mining.get(name)), method))  # raises if it cannot
    loss = Contrastive(miner=mining.get(name) if name != "DistanceWeighted"
                       else mining.DistanceWeighted(seed=0))
    labels, x = _angles_batch()
    records = _Records()
    logger = tf.get_logger()
    logger.addHandler(records)
    try:
        value = tf.function(lambda y, e: loss(y, e))(labels, x)
    finally:
        logger.removeHandler(records)
    assert np.isfinite(float(value))
    assert not [m for m in records if "AutoGraph" in m], records
