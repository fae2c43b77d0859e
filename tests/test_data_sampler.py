import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_dml.data import ClassBalancedSampler


def _labels(num_classes=23, seed=0, low=2, high=9):
    rng = np.random.default_rng(seed)
    return np.repeat(np.arange(num_classes) * 7 + 3, rng.integers(low, high, num_classes))


def _stream(sampler, steps):
    return np.stack([sampler.next_batch() for _ in range(steps)])


@pytest.mark.parametrize("c,k", [(5, 2), (4, 3), (23, 1), (7, 4)])
def test_batches_are_c_classes_by_k_distinct_samples(c, k):
    labels = _labels()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # k=4 leaves some classes small
        sampler = ClassBalancedSampler(labels, c, k, seed=1)
    values, counts = np.unique(labels, return_counts=True)
    for batch in _stream(sampler, 120):
        y = labels[batch.reshape(c, k)]
        assert (y == y[:, :1]).all() and len(set(y[:, 0])) == c
        for row, cls in zip(batch.reshape(c, k), y[:, 0]):
            if counts[np.searchsorted(values, cls)] >= k:
                assert len(set(row)) == k


def test_every_class_once_per_epoch_and_the_last_batch_completed_from_the_first():
    labels = _labels(num_classes=23, low=3, high=9)
    sampler = ClassBalancedSampler(labels, 5, 3, seed=2)
    assert sampler.batches_per_epoch == 5  # ceil(23 / 5)
    values = np.unique(labels)
    for epoch in range(6):
        batches = [labels[sampler.next_batch()[::3]] for _ in range(5)]
        seen = np.concatenate(batches)
        assert sorted(set(seen)) == list(values)  # all 23 classes, each once...
        assert len(seen) - len(set(seen)) == 2  # ...but the 2 completing the last batch,
        assert set(batches[-1][3:]) <= set(batches[0])  # taken from the first batch
        assert len(set(batches[-1])) == 5


def test_samples_are_drawn_in_passes_without_replacement():
    labels = np.repeat(np.arange(6), [8, 9, 10, 11, 4, 5])
    sampler = ClassBalancedSampler(labels, 6, 4, seed=3)  # every class in every batch
    drawn = {c: [] for c in range(6)}
    for batch in _stream(sampler, 60):
        for c, row in zip(labels[batch[::4]], batch.reshape(6, 4)):
            drawn[c].append(row)
    for c, rows in drawn.items():
        size = np.sum(labels == c)
        per_pass = size // 4
        for start in range(0, len(rows) - per_pass + 1, per_pass):
            one_pass = np.concatenate(rows[start:start + per_pass])
            assert len(set(one_pass)) == per_pass * 4  # no repeat inside a pass
        counts = np.bincount(np.concatenate(rows), minlength=len(labels))[labels == c]
        assert counts.min() > 0 and counts.max() - counts.min() <= 60 // per_pass // 2


def test_batch_t_is_a_pure_function_of_seed_and_t():
    labels = _labels()
    a, b, c = (ClassBalancedSampler(labels, 4, 2, seed=s) for s in (7, 7, 8))
    first = _stream(a, 20)
    np.testing.assert_array_equal(first, _stream(b, 20))
    assert not np.array_equal(first, _stream(c, 20))
    # Graph mode, out of order, any step: the same batches.
    batch = tf.function(b.batch)
    np.testing.assert_array_equal(batch(tf.constant(13, tf.int64)), first[13])
    np.testing.assert_array_equal(b.batch(3).numpy(), first[3])


def test_an_epoch_at_once_is_its_batches_and_the_stream_starts_anywhere():
    labels = _labels(num_classes=23, low=1, high=9)  # classes smaller than k: replaced
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = ClassBalancedSampler(labels, 5, 3, seed=5)
    per_epoch = sampler.batches_per_epoch
    for epoch in (0, 3):
        rows = sampler.numpy_epoch(epoch)
        assert rows.shape == (per_epoch, 15) and rows.dtype == np.int64
        np.testing.assert_array_equal(
            rows, [sampler.numpy_batch(epoch * per_epoch + i) for i in range(per_epoch)])
        np.testing.assert_array_equal(sampler.epoch(epoch).numpy(), rows)
    from keras_dml.data.pipeline import StreamPosition, sampler_steps

    position = StreamPosition(start=per_epoch + 2)  # mid-epoch: the stream skips to it
    drawn = list(sampler_steps(sampler, position).take(2 * per_epoch).as_numpy_iterator())
    steps = np.arange(per_epoch + 2, 3 * per_epoch + 2)
    np.testing.assert_array_equal([step for step, _ in drawn], steps)
    np.testing.assert_array_equal([batch for _, batch in drawn],
                                  [sampler.numpy_batch(step) for step in steps])


def test_the_sampler_benchmark_draws_the_same_batches_either_way():
    from benchmarks import tf_systems

    (epoch_step, facts), (batch_step, _) = (
        tf_systems.sampler_epoch(samples=600, classes=120, per_batch=per_batch)
        for per_batch in (False, True))
    assert facts == {"batches": 3, "batch_size": 180}
    for (step, indices), (same_step, same) in zip(epoch_step(), batch_step()):
        assert step == same_step and (indices == same).all()


def test_class_and_sample_frequencies_even_out():
    labels = _labels(num_classes=23, low=3, high=9)
    sampler = ClassBalancedSampler(labels, 5, 3, seed=4)
    stream = _stream(sampler, 250)  # 50 epochs over classes
    class_counts = np.bincount(np.searchsorted(np.unique(labels), labels[stream[:, ::3]]).ravel())
    assert class_counts.min() >= 50 and class_counts.max() <= 100
    sample_counts = np.bincount(stream.ravel(), minlength=len(labels))
    for c in np.unique(labels):
        per = sample_counts[labels == c]
        assert per.min() > 0 and per.max() <= 3 * per.min()


def test_sop_scale_labels():
    rng = np.random.default_rng(0)
    counts = np.maximum(2, rng.poisson(5.26, 11318))
    labels = rng.permutation(np.repeat(np.arange(11318), counts))
    sampler = ClassBalancedSampler(labels, 90, 2, seed=0)
    assert sampler.members.nbytes == labels.size * 8  # O(N), no per-class copies
    assert sampler.batches_per_epoch == 126
    epoch = np.concatenate([labels[sampler.next_batch()[::2]] for _ in range(126)])
    assert len(set(epoch)) == 11318


def test_small_classes_replace_or_drop():
    labels = np.array([0] * 5 + [1] * 5 + [2] + [3] * 4)
    with pytest.warns(UserWarning, match="1 of 4 classes .* drawn with replacement"):
        sampler = ClassBalancedSampler(labels, 4, 2, seed=0)
    assert sampler.num_small_classes == 1
    batch = sampler.next_batch().reshape(4, 2)
    assert set(labels[batch[:, 0]]) == {0, 1, 2, 3}
    assert (batch[labels[batch[:, 0]] == 2] == 10).all()  # class 2's only sample, twice
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
