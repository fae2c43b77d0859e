"""`keras_dml.data.evaluation_batches`: a split in order for RecallAtK and embedding."""

import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from conftest import SHARED_DATASETS
from keras_dml.callbacks import RecallAtK
from keras_dml.data import Preprocessing, evaluation_batches

CUB = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011")


def test_in_memory_split_in_order():
    test = keras_dml.datasets.load("digits").test
    batches = list(evaluation_batches(test, batch_size=100))
    assert sum(len(y) for _, y in batches) == len(test.labels)
    np.testing.assert_array_equal(np.concatenate([y for _, y in batches]), test.labels)
    np.testing.assert_array_equal(batches[0][0].numpy(), test.images[:100])


@pytest.mark.shared_data
def test_file_split_is_decoded_with_the_evaluation_preprocessing():
    test = keras_dml.datasets.load("cub200", data_dir=CUB).test
    subset = test.subset(np.arange(5), remap=False)
    (images, labels), = list(evaluation_batches(subset, Preprocessing(32, 36), batch_size=8))
    assert images.shape == (5, 32, 32, 3) and images.dtype == "float32"
    np.testing.assert_array_equal(labels.numpy(), subset.labels)
    with pytest.raises(ValueError, match="pass preprocessing"):
        evaluation_batches(subset)
    with pytest.raises(ValueError, match="batch_size"):
        evaluation_batches(subset, Preprocessing(32, 36), batch_size=0)


@pytest.mark.shared_data
def test_every_source_of_the_training_pipelines_is_accepted():
    test = keras_dml.datasets.load("cub200", data_dir=CUB).test
    subset = test.subset(np.arange(5), remap=False)
    preprocessing = Preprocessing(16)
    expected = np.concatenate([x for x, _ in evaluation_batches(subset, preprocessing, 2)])
    names = [subset.class_names[y] for y in subset.labels]
    for source in ((subset.paths, subset.labels), (np.array(subset.paths), names)):
        batches = evaluation_batches(source, preprocessing, batch_size=2)
        assert int(batches.cardinality()) == 3
        x = np.concatenate([x for x, _ in batches])
        np.testing.assert_allclose(x, expected)
    (_, y), = list(evaluation_batches((subset.paths, names), preprocessing, 8))
    np.testing.assert_array_equal(y, np.unique(names, return_inverse=True)[1])
    digits = keras_dml.datasets.load("digits").test
    for source in ((digits.images[:7], digits.labels[:7]),
                   tf.data.Dataset.from_tensor_slices((digits.images[:7], digits.labels[:7]))):
        (x, y), = list(evaluation_batches(source, batch_size=8))
        np.testing.assert_array_equal(x, digits.images[:7])
        np.testing.assert_array_equal(y, digits.labels[:7])


@pytest.mark.shared_data
def test_a_bad_file_is_an_error_naming_it(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    paths = sorted(glob.glob(os.path.join(CUB, "images", "*", "*.jpg")))[:3] + [str(bad)]
    batches = evaluation_batches((paths, [0, 0, 1, 1]), Preprocessing(16), batch_size=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="image 3 .*bad.jpg"):
        list(batches)


def test_recall_at_k_logs_on_evaluation_batches_during_fit():
    splits = keras_dml.datasets.load("digits")
    backbone = keras_dml.backbones.convnet((8, 8, 1))
    model = keras_dml.models.DMLModel(
        backbone.input, keras_dml.layers.EmbeddingHead(16)(backbone.output))
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras_dml.losses.MultiSimilarity())
    train = keras_dml.data.class_balanced_batches(splits.train, 5, 8, seed=0)
    history = model.fit(train, steps_per_epoch=2, epochs=1, verbose=0,
                        callbacks=[RecallAtK(evaluation_batches(splits.test), verbose=0)])
    assert 0.0 < history.history["val_recall@1"][0] <= 1.0
