"""The NumPy C x k stream (`ClassBalancedSampler.numpy_batch`, `ClassBalancedPyDataset`).

Backend-neutral: no TensorFlow here, so the file runs under every KERAS_BACKEND
(and where TensorFlow is not installed). The tf.data stream's equality with it is
in test_data_pipeline.py.
"""

import warnings

import keras
import numpy as np
import pytest

from keras_dml.data import ClassBalancedPyDataset, ClassBalancedSampler

#: Runs on every Keras backend (tests/conftest.py collects it on JAX and PyTorch too).
pytestmark = pytest.mark.backend_neutral


def _arrays(num_classes=13, seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.arange(num_classes) * 5 + 2, rng.integers(3, 9, num_classes))
    x = rng.integers(0, 255, (len(y), 6, 6), dtype=np.uint8)
    return x, y


def test_batches_are_the_samplers_numpy_stream():
    x, y = _arrays()
    batches = ClassBalancedPyDataset(x, y, 4, 3, seed=7)
    sampler = ClassBalancedSampler(y, 4, 3, seed=7)
    assert batches.num_batches is None and batches.batch_size == 12
    for step in range(12):
        xb, yb = batches[step]
        indices = sampler.next_batch()
        np.testing.assert_array_equal(xb, x[indices])
        np.testing.assert_array_equal(yb, y[indices])
        assert yb.dtype == np.int32
        assert len(set(yb.reshape(4, 3)[:, 0])) == 4 and (yb.reshape(4, 3).T == yb[::3]).all()


def test_start_step_continues_the_same_stream():
    x, y = _arrays()
    full = ClassBalancedPyDataset(x, y, 4, 3, seed=3)
    resumed = ClassBalancedPyDataset(x, y, 4, 3, seed=3, start_step=5)
    for i in range(4):
        np.testing.assert_array_equal(resumed[i][1], full[5 + i][1])
        np.testing.assert_array_equal(resumed[i][0], full[5 + i][0])


def test_numpy_batch_is_a_pure_function_of_seed_and_step():
    _, y = _arrays()
    a, b = ClassBalancedSampler(y, 5, 2, seed=11), ClassBalancedSampler(y, 5, 2, seed=11)
    other = ClassBalancedSampler(y, 5, 2, seed=12)
    for step in (0, 1, 7, 1000, 2 ** 33 + 3):
        np.testing.assert_array_equal(a.numpy_batch(step), b.numpy_batch(step))
    assert not all(np.array_equal(a.numpy_batch(s), other.numpy_batch(s)) for s in range(5))


def test_string_labels_become_sorted_ids_and_map_fn_applies():
    x, y = _arrays()
    names = np.array([f"class {v:03d}" for v in y])
    batches = ClassBalancedPyDataset(
        x, names, 4, 2, seed=0, map_fn=lambda xb, yb: (xb.astype("float32") / 255.0, yb))
    xb, yb = batches[0]
    assert xb.dtype == np.float32 and xb.max() <= 1.0
    assert batches.class_names == sorted(set(names.tolist()))
    np.testing.assert_array_equal(np.asarray(batches.class_names)[yb], names[
        ClassBalancedSampler(batches.labels, 4, 2, seed=0).numpy_batch(0)])


def test_image_paths_and_bad_labels_are_refused():
    with pytest.raises(ValueError, match="class_balanced_batches"):
        ClassBalancedPyDataset(["a.jpg", "b.jpg"], [0, 1], 2, 1)
    with pytest.raises(ValueError, match="integer class ids or of class names"):
        ClassBalancedPyDataset(np.zeros((4, 2)), np.zeros(4), 2, 1)
    with pytest.raises(ValueError, match="4 inputs but 3 labels"):
        ClassBalancedPyDataset(np.zeros((4, 2)), [0, 1, 1], 2, 1)


def test_fit_reads_the_stream_in_order_across_epochs():
    x, y = _arrays(num_classes=8)
    y = y // 5  # ids 0..7 for the softmax below

    class Recorded(ClassBalancedPyDataset):
        asked = []

        def __getitem__(self, index):
            self.asked.append(int(index))
            return super().__getitem__(index)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        batches = Recorded(x, y, 4, 2, seed=0,
                           map_fn=lambda xb, yb: (xb.reshape(len(xb), -1) / 255.0, yb))
    model = keras.Sequential([keras.Input((36,)), keras.layers.Dense(8)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(batches, epochs=2, steps_per_epoch=3, verbose=0)
    assert len(history.history["loss"]) == 2
    # One stream, not restarted per epoch: 0, 1, 2, ... (on TensorFlow, Keras first
    # reads batches 0 and 1 to learn the tensor spec, then iterates from 0, prefetching).
    asked = Recorded.asked
    start = len(asked) - 1 - asked[::-1].index(0)
    assert asked[start:] == list(range(len(asked) - start)) and len(asked) - start >= 6
