"""Tests for keras_dml.data.stream: a keras_dml stream is one object carrying its
preprocessing, resume position and bad-image guard, and a transformed stream keeps
what still holds (.prefetch, .map, .take, .repeat) or says in one line what it lost."""

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import data
from keras_dml.callbacks import TrainingBackup
from keras_dml.data import Preprocessing, class_balanced_batches, evaluation_batches
from keras_dml.datasets.base import LabeledImages
from keras_dml.losses import MultiSimilarity
from keras_dml.models import DMLModel

UNIT = Preprocessing(image_size=8, resize_size=10)
LABELS = np.repeat(np.arange(6), 4)

#: The transformations a stream forwards, each as a user would add it.
KEEPING = {
    "prefetch": lambda ds: ds.prefetch(2),
    "map": lambda ds: ds.map(lambda x, y: (x * 1.0, y)),
    "repeat": lambda ds: ds.repeat(),
    "chained": lambda ds: ds.map(lambda x, y: (x, y)).repeat().prefetch(1),
}


def _pixels(n=24, size=10):
    return np.random.default_rng(0).integers(0, 255, (n, size, size, 3), dtype=np.uint8)


def _stream(seed=0, **kwargs):
    return class_balanced_batches((_pixels(), LABELS), 3, 2, seed=seed, preprocessing=UNIT,
                                  **kwargs)


def _model():
    inputs = keras.Input((8, 8, 3))
    model = DMLModel(inputs, keras.layers.Dense(4)(keras.layers.Flatten()(inputs)))
    model.compile("sgd", loss=MultiSimilarity())
    return model


def _labels(dataset, count):
    return [y.numpy().tolist() for _, y in dataset.take(count)]


def test_a_stream_is_a_dataset_that_carries_what_it_applies():
    stream = _stream()
    assert isinstance(stream, tf.data.Dataset) and isinstance(stream, data.Stream)
    assert stream.element_spec[0].shape.as_list() == [6, 8, 8, 3]
    assert stream.preprocessing is UNIT
    assert stream.position is data.stream_position(stream)
    assert stream.position.seed == 0 and stream.position.batch_size == 6
    assert _labels(stream, 3) == _labels(_stream(), 3)  # iteration as before


@pytest.mark.parametrize("name", sorted(KEEPING))
def test_a_forwarded_transformation_keeps_preprocessing_position_and_guard(name):
    stream = _stream()
    transformed = KEEPING[name](stream)
    assert transformed.preprocessing is UNIT
    assert data.stream_position(transformed) is stream.position
    assert transformed.guard is stream.guard


@pytest.mark.parametrize("name", ["prefetch", "map", "repeat"])
def test_the_position_of_a_transformed_stream_moves_its_batches(name):
    expected = _labels(_stream(), 7)[5:]
    transformed = KEEPING[name](_stream())
    backup = TrainingBackup("unused", stream=transformed)
    backup.position.start = 5  # what a resume does
    assert _labels(transformed, 2) == expected


@pytest.mark.parametrize("name", ["prefetch", "map", "take", "repeat"])
def test_fit_on_a_transformed_stream_saves_its_preprocessing(name, tmp_path):
    transformed = _stream().take(4) if name == "take" else KEEPING[name](_stream())
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing was lost: nothing to say
        model.fit(transformed, epochs=1, verbose=0,
                  steps_per_epoch=None if name == "take" else 2)
    assert model.preprocessing == UNIT
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").preprocessing == UNIT


def test_take_keeps_the_preprocessing_and_says_in_one_line_it_drops_the_position():
    taken = _stream().take(5)
    assert taken.preprocessing is UNIT and data.stream_position(taken) is None
    with pytest.raises(ValueError, match=r"\.take\(5\).*resume position.*steps_per_epoch=5"):
        TrainingBackup("unused", stream=taken)
    with pytest.raises(ValueError) as error:
        TrainingBackup("unused", stream=taken.prefetch(1))  # lost stays lost
    assert "\n" not in str(error.value)


def test_another_transformation_says_in_one_line_what_it_dropped():
    shuffled = _stream().shuffle(2)
    assert not isinstance(shuffled, data.Stream)
    model = _model()
    dropped = r"keras_dml stream by \.shuffle\(\), which drops its preprocessing"
    with pytest.warns(UserWarning, match=dropped) as got:
        model.fit(shuffled, steps_per_epoch=1, verbose=0)
    message = [str(w.message) for w in got if "keras_dml stream" in str(w.message)]
    assert len(message) == 1 and "\n" not in message[0]
    assert getattr(model, "preprocessing", None) is None
    with pytest.raises(ValueError, match=r"\.shuffle\(\).*resume position"):
        TrainingBackup("unused", stream=shuffled)


def test_a_plain_dataset_is_no_stream_and_warns_nothing():
    plain = tf.data.Dataset.from_tensor_slices(
        (np.zeros((6, 8, 8, 3), "float32"), LABELS[:6] // 2)).batch(6).repeat()
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.fit(plain, steps_per_epoch=1, verbose=0)
    assert getattr(model, "preprocessing", None) is None
    assert data.stream_position(plain) is None


def test_a_transformed_evaluation_stream_keeps_its_guard_and_its_skipped_files(tmp_path):
    paths = []
    for i, image in enumerate(_pixels(4)):
        paths.append(str(tmp_path / f"{i}.png"))
        tf.io.write_file(paths[-1], tf.io.encode_png(image))
    with open(paths[1], "wb") as handle:
        handle.write(b"not an image")
    split = LabeledImages(images=None, paths=paths, labels=np.array([0, 0, 1, 1]),
                          class_names=["a", "b"], original_class_ids=np.array([0, 1]))
    batches = evaluation_batches(split, UNIT, batch_size=2, skip_bad_images=True).prefetch(1)
    assert batches.preprocessing is UNIT and batches.position is None
    assert sum(int(tf.size(y)) for _, y in batches) == 3
    assert batches.skipped_files() == [paths[1]]
