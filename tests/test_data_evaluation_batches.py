"""`keras_dml.data.evaluation_batches`: a split in order for RecallAtK and embedding."""

import os

import keras
import numpy as np
import pytest

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
