import numpy as np
import pytest

import keras_dml
from keras_dml.datasets import DMLSplits, LabeledImages, load


def test_digits_contract():
    splits = load("digits")
    assert isinstance(splits, DMLSplits)
    train, test = splits.train, splits.test
    assert isinstance(train, LabeledImages)
    assert train.images.shape[1:] == (8, 8, 1) and train.images.dtype == np.float32
    assert len(train) + len(test) == 1797
    assert 0.0 <= train.images.min() and train.images.max() == 1.0
    assert train.num_classes == test.num_classes == 5
    np.testing.assert_array_equal(train.original_class_ids, [0, 1, 2, 3, 4])
    np.testing.assert_array_equal(test.original_class_ids, [5, 6, 7, 8, 9])
    assert test.class_names == ["5", "6", "7", "8", "9"]
    assert train.labels.dtype == np.int32 and set(train.labels) == set(range(5))
    assert train.paths is None
    # Label mapping is faithful: compare against scikit-learn directly.
    from sklearn.datasets import load_digits

    bunch = load_digits()
    mask = bunch.target >= 5
    np.testing.assert_array_equal(test.original_class_ids[test.labels], bunch.target[mask])
    np.testing.assert_allclose(test.images[..., 0] * 16, bunch.images[mask])
    assert load("digits", split="test").num_classes == 5


def test_unknown_name_and_split():
    with pytest.raises(ValueError, match="Unknown dataset"):
        load("mnist-ish")
    with pytest.raises(ValueError, match="split"):
        load("digits", split="validation")
    with pytest.raises(ValueError, match="gallery"):
        load("digits", split="gallery")


def test_labeled_images_validation():
    with pytest.raises(ValueError, match="exactly one"):
        LabeledImages(images=None, paths=None, labels=np.zeros(1, int),
                      class_names=["a"], original_class_ids=np.array([0]))
    with pytest.raises(ValueError, match="must match"):
        LabeledImages(images=np.zeros((2, 1, 1, 1)), paths=None, labels=np.zeros(3, int),
                      class_names=["a"], original_class_ids=np.array([0]))
    with pytest.raises(ValueError, match="range"):
        LabeledImages(images=np.zeros((2, 1, 1, 1)), paths=None, labels=np.array([0, 2]),
                      class_names=["a", "b"], original_class_ids=np.array([0, 1]))


def test_lazy_top_level_access():
    assert keras_dml.datasets.load is load
