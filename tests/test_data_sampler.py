import warnings

import numpy as np
import pytest

from keras_dml.data import ClassBalancedSampler
from keras_dml.data.sampler import draw_cyclic


def _labels(num_classes=23, seed=0, low=2, high=9):
    rng = np.random.default_rng(seed)
    return np.repeat(np.arange(num_classes) * 7 + 3, rng.integers(low, high, num_classes))


def test_draw_cyclic_every_item_once_per_pass_and_distinct():
    rng = np.random.default_rng(0)
    segment = np.arange(7)
    cursor, drawn = 0, []
    for _ in range(40):
        items, cursor = draw_cyclic(segment, cursor, 3, rng)
        assert len(set(items)) == 3
        drawn.extend(items)
        counts = np.bincount(drawn, minlength=7)
        assert counts.max() - counts.min() <= 1
    assert sorted(segment) == list(range(7))


@pytest.mark.parametrize("c,k", [(5, 2), (4, 3), (23, 1), (7, 4)])
def test_batches_are_c_classes_by_k_distinct_samples(c, k):
    labels = _labels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # k=4 leaves some classes small
        sampler = ClassBalancedSampler(labels, c, k, seed=1)
    counts = np.bincount(np.unique(labels, return_inverse=True)[1])
    for _ in range(300):
        batch = sampler.next_batch().reshape(c, k)
        y = labels[batch]
        assert (y == y[:, :1]).all() and len(set(y[:, 0])) == c
        for row, cls in zip(batch, y[:, 0]):
            if counts[np.searchsorted(np.unique(labels), cls)] >= k:
                assert len(set(row)) == k


def test_class_and_sample_frequencies_are_uniform_within_epochs():
    labels = _labels(num_classes=23, low=3, high=9)
    sampler = ClassBalancedSampler(labels, 5, 3, seed=2)
    class_counts = np.zeros(23, int)
    sample_counts = np.zeros(len(labels), int)
    values = np.unique(labels)
    for _ in range(500):
        batch = sampler.next_batch()
        np.add.at(class_counts, np.searchsorted(values, labels[batch[::3]]), 1)
        np.add.at(sample_counts, batch, 1)
        # Every class appears before any class repeats.
        assert class_counts.max() - class_counts.min() <= 1
        for c in values:  # likewise samples within each class
            per = sample_counts[labels == c]
            assert per.max() - per.min() <= 1


def test_same_seed_same_stream():
    labels = _labels()
    a, b, c = (ClassBalancedSampler(labels, 4, 2, seed=s) for s in (7, 7, 8))
    first = [a.next_batch() for _ in range(20)]
    np.testing.assert_array_equal(first, [b.next_batch() for _ in range(20)])
    assert not np.array_equal(first, [c.next_batch() for _ in range(20)])


def test_sop_scale_labels():
    rng = np.random.default_rng(0)
    counts = np.maximum(2, rng.poisson(5.26, 11318))
    labels = rng.permutation(np.repeat(np.arange(11318), counts))
    sampler = ClassBalancedSampler(labels, 90, 2, seed=0)
    assert sampler._pool.nbytes == labels.size * 8  # O(N), no per-class copies
    seen = set()
    for _ in range(126):  # one epoch over classes: 11318 / 90 batches
        seen.update(labels[sampler.next_batch()[::2]])
    assert len(seen) >= 11318 - 90


def test_small_classes_replace_or_drop():
    labels = np.array([0] * 5 + [1] * 5 + [2] + [3] * 4)
    with pytest.warns(UserWarning, match="1 of 4 classes .* drawn with replacement"):
        sampler = ClassBalancedSampler(labels, 4, 2, seed=0)
    assert sampler.num_small_classes == 1
    batch = sampler.next_batch().reshape(4, 2)
    assert set(labels[batch[:, 0]]) == {0, 1, 2, 3}
    with pytest.warns(UserWarning, match="left out"):
        sampler = ClassBalancedSampler(labels, 3, 2, small_classes="drop", seed=0)
    assert sampler.num_classes == 3
    for _ in range(30):
        assert 2 not in labels[sampler.next_batch()]


@pytest.mark.parametrize("kwargs,match", [
    (dict(labels=np.zeros((2, 2), int), classes_per_batch=1, samples_per_class=1), "1-D"),
    (dict(labels=np.array([0.5, 1.0]), classes_per_batch=1, samples_per_class=1), "integer"),
    (dict(labels=np.arange(4), classes_per_batch=0, samples_per_class=1), "classes_per_batch"),
    (dict(labels=np.arange(4), classes_per_batch=2, samples_per_class=-1), "samples_per_class"),
    (dict(labels=np.arange(4), classes_per_batch=5, samples_per_class=1), "only 4 classes"),
    (dict(labels=np.arange(4), classes_per_batch=2, samples_per_class=1,
          small_classes="skip"), "small_classes"),
])
def test_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ClassBalancedSampler(**kwargs)
