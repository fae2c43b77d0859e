"""Tests for keras_dml.data.stream_preprocessing: a stream's Preprocessing reaches the
model (saved with it, so an export needs no flags), and inputs normalised twice warn."""

import re
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import cli
from keras_dml.backbones import cnn3
from keras_dml.data import Preprocessing, class_balanced_batches, evaluation_batches
from keras_dml.data.stream_preprocessing import (input_rescaling, normalised_twice,
                                                 stream_preprocessing)
from keras_dml.datasets.base import LabeledImages
from keras_dml.export import read_export_info
from keras_dml.losses import MultiSimilarity
from keras_dml.models import DMLModel

UNIT = Preprocessing(image_size=8, resize_size=10)  # normalization="unit"
NONE = Preprocessing(image_size=8, resize_size=10, normalization="none")


def _pixels(n=24, size=10):
    return np.random.default_rng(0).integers(0, 255, (n, size, size, 3), dtype=np.uint8)


def _rescaling_model():
    """A model that rescales its [0, 255] inputs itself, as MobileNetV3 does."""
    inputs = keras.Input((8, 8, 3))
    x = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0)(inputs)
    return DMLModel(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(x)))


def test_streams_record_the_preprocessing_they_apply(tmp_path):
    labels = np.repeat(np.arange(6), 4)
    assert stream_preprocessing(class_balanced_batches((_pixels(), labels), 3, 2,
                                                       preprocessing=UNIT)) is UNIT
    assert stream_preprocessing(class_balanced_batches((_pixels(), labels), 3, 2)) is None
    paths = []
    for i, image in enumerate(_pixels(4)):
        paths.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    split = LabeledImages(images=None, paths=paths, labels=np.array([0, 0, 1, 1]),
                          class_names=["a", "b"], original_class_ids=np.array([0, 1]))
    batches = evaluation_batches(split, NONE, batch_size=2)
    assert stream_preprocessing(batches) is NONE
    assert stream_preprocessing(batches.map(lambda x, y: (x, y))) is NONE  # kept (data.Stream)
    assert stream_preprocessing(batches.batch(1)) is None  # a plain dataset
    assert stream_preprocessing((np.zeros(2), np.zeros(2))) is None


def test_keras_applications_that_rescale_inside_are_found():
    mobilenet = keras.applications.MobileNetV3Small(input_shape=(32, 32, 3), weights=None,
                                                    include_top=False)
    assert [type(layer).__name__ for layer in input_rescaling(mobilenet)] == ["Rescaling"]
    efficientnet = keras.applications.EfficientNetB0(input_shape=(32, 32, 3), weights=None,
                                                     include_top=False)
    assert [type(layer).__name__ for layer in input_rescaling(efficientnet)] == [
        "Rescaling", "Normalization"]
    inputs = keras.Input((32, 32, 3))  # nested, as backbone(inputs) under a head
    assert input_rescaling(keras.Model(inputs, keras.layers.Dense(2)(mobilenet(inputs))))
    assert input_rescaling(cnn3((32, 32, 3))) == []
    message = normalised_twice(mobilenet, Preprocessing(image_size=32, resize_size=32))
    assert re.search(r"normalization='unit'\) maps pixels to \[0, 1\].*Rescaling.*sees "
                     r"values in \[-1, -0.992\] instead of \[-1, 1\].*normalization='none'",
                     message), message
    assert normalised_twice(mobilenet, Preprocessing(32, 32, normalization="none")) is None


def test_fit_warns_on_inputs_normalised_twice_and_records_the_preprocessing(tmp_path):
    labels = np.repeat(np.arange(6), 4)
    model = _rescaling_model()
    model.compile("sgd", loss=MultiSimilarity())
    with pytest.warns(UserWarning, match="inputs normalised twice"):
        model.fit(class_balanced_batches((_pixels(), labels), 3, 2, seed=0,
                                         preprocessing=UNIT), steps_per_epoch=1, verbose=0,
                  shuffle=False)
    assert model.preprocessing == UNIT
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").preprocessing == UNIT
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(class_balanced_batches((_pixels(), labels), 3, 2, seed=0,
                                         preprocessing=NONE), steps_per_epoch=1, verbose=0,
                  shuffle=False)
    assert model.preprocessing == NONE


def test_export_of_a_model_saved_from_python_needs_no_flags(tmp_path, capsys):
    model = _rescaling_model()
    model.compile("sgd", loss=MultiSimilarity())
    keras_path = str(tmp_path / "plain.keras")
    model.save(keras_path)  # never fitted on a keras_dml stream: nothing recorded
    assert cli.main(["export", keras_path, str(tmp_path / "out"), "--no-warmup"]) == 2
    error = capsys.readouterr().err
    assert "--image-size N --resize-size N --normalization NAME" in error
    assert "Preprocessing(" not in error
    model.fit(class_balanced_batches((_pixels(), np.repeat(np.arange(6), 4)), 3, 2, seed=0,
                                     preprocessing=NONE), steps_per_epoch=1, verbose=0,
                  shuffle=False)
    keras_path = str(tmp_path / "fitted.keras")
    model.save(keras_path)
    assert cli.main(["export", keras_path, str(tmp_path / "out"), "--no-warmup",
                     "--no-verify"]) == 0
    path = re.search(r"SavedModel: (\S+)", capsys.readouterr().out).group(1)
    assert Preprocessing.from_dict(read_export_info(path)["preprocessing"]) == NONE
