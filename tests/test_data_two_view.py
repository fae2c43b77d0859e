"""two_view_batches: two augmented views per instance, instance or class labels."""

import keras
import numpy as np
import pytest

from keras_dml.data import two_view_batches


def test_two_views_per_distinct_instance():
    x = np.arange(40, dtype="float32").reshape(40, 1, 1, 1) * np.ones((1, 4, 4, 1), "float32")
    shift = keras.layers.Lambda(lambda b: b + keras.random.uniform((b.shape[0] or 1, 1, 1, 1)))
    xb, yb = next(iter(two_view_batches(x, shift, 8, seed=0)))
    assert xb.shape == (16, 4, 4, 1) and yb.shape == (16,)
    yb = yb.numpy()
    np.testing.assert_array_equal(yb[0::2], yb[1::2])
    assert len(set(yb[0::2])) == 8
    # each view is its own instance's image plus a fresh draw in [0, 1)
    base = xb.numpy()[:, 0, 0, 0] - yb
    assert np.all((base >= 0) & (base < 1)) and not np.allclose(base[0::2], base[1::2])


def test_class_labels_and_errors():
    x = np.zeros((10, 2, 2, 1), "float32")
    y = np.repeat(np.arange(5), 2)
    _, yb = next(iter(two_view_batches((x, y), lambda b: b, 4, labels="class", seed=1)))
    assert set(yb.numpy()) <= set(range(5))
    with pytest.raises(ValueError, match="needs labelled data"):
        two_view_batches(x, lambda b: b, 4, labels="class")
    with pytest.raises(ValueError, match="larger than data"):
        two_view_batches(x, lambda b: b, 11)
    with pytest.raises(ValueError, match="callable"):
        two_view_batches(x, None, 4)
