import keras
import numpy as np
import pytest

import keras_dml
from keras_dml.data import (HardNegativeClassMining, HardNegativeClassSampler,
                            hard_negative_class_batches)


def _grouped_classes(num_groups=5, per_group=4, seed=0):
    """Class representatives in tight, well separated groups of `per_group`."""
    rng = np.random.default_rng(seed)
    centres = np.eye(num_groups, 16) * 10
    reps = np.repeat(centres, per_group, axis=0) + rng.normal(0, 0.1, (num_groups * per_group, 16))
    return reps, np.arange(num_groups * per_group) // per_group


def test_mined_batches_are_the_most_violating_classes():
    reps, group = _grouped_classes()
    labels = np.repeat(np.arange(20), 3)
    sampler = HardNegativeClassSampler(labels, classes_per_batch=4, seed=0)
    sampler.update(reps)
    seeds = []
    for _ in range(40):
        batch = sampler.next_batch().reshape(4, 2)
        classes = labels[batch[:, 0]]
        assert (labels[batch] == classes[:, None]).all() and len(set(classes)) == 4
        assert len(set(batch.ravel())) == 8
        assert len(set(group[classes])) == 1  # its whole (hardest) group
        seeds.append(classes[0])
    # Seed classes cycle through all classes (uniform within an epoch).
    assert sorted(seeds[:20]) == list(range(20))


def test_greedy_picks_nearest_to_any_chosen_class():
    # A chain on a line: 0 - 1 - 2 ... each next class is nearest to the last.
    angles = np.cumsum(np.linspace(0.05, 0.2, 10))  # distinct gaps: no ties
    reps = np.stack([np.cos(angles), np.sin(angles)], 1)
    labels = np.repeat(np.arange(10), 2)
    sampler = HardNegativeClassSampler(labels, classes_per_batch=3, seed=1)
    sampler.update(reps)
    for _ in range(10):
        classes = labels[sampler.next_batch()[::2]]
        first = classes[0]
        cos = reps @ reps.T
        cos[first, first] = -np.inf
        assert classes[1] == np.argmax(cos[first])
        span = sorted(classes)
        assert span[-1] - span[0] == 2  # three consecutive classes


def test_before_update_it_is_class_balanced_and_validates():
    labels = np.repeat(np.arange(6), 3)
    sampler = HardNegativeClassSampler(labels, classes_per_batch=3, seed=0)
    batch = labels[sampler.next_batch()].reshape(3, 2)
    assert len(set(batch[:, 0])) == 3
    with pytest.raises(ValueError, match=r"\(6, d\)"):
        sampler.update(np.zeros((5, 4)))
    with pytest.raises(ValueError, match="NaN"):
        sampler.update(np.full((6, 4), np.nan))


def test_callback_refreshes_from_the_model_during_fit():
    split = keras_dml.datasets.load("digits").train
    dataset, sampler = hard_negative_class_batches(split, 4, 2, seed=0)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
                              keras.layers.Dense(8)])
    model.compile(optimizer="sgd", loss=lambda y, e: keras.ops.mean(e ** 2))
    callback = HardNegativeClassMining(sampler, split, refresh_every=3, seed=0)
    model.fit(dataset, steps_per_epoch=7, epochs=1, verbose=0, callbacks=[callback])
    assert sampler.num_updates == 1 + 7 // 3
    reps = callback.class_representatives()
    assert reps.shape == (5, 8) and np.isfinite(reps).all()
    x, y = next(iter(dataset))
    assert x.shape == (8, 8, 8, 1)


@pytest.mark.parametrize("num_neighbors", [0, -2, 1.5, True])
def test_bad_num_neighbors_is_a_value_error(num_neighbors):
    labels = np.repeat(np.arange(10), 4)
    with pytest.raises(ValueError, match="num_neighbors must be a positive integer"):
        HardNegativeClassSampler(labels, 4, 2, num_neighbors=num_neighbors)
