"""keras_dml.data.sources: a training source of image files holds each decoded, resized
image after its first read, with the same values as decoding again."""

import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_dml.data import Preprocessing, class_balanced_batches
from keras_dml.data.inputs import SAMPLES, as_data
from keras_dml.data.sources import DECODED_CACHE_MB, make_source, resized_bytes
from keras_dml.training.config import TrainConfig

from conftest import SHARED_DATASETS

IMAGES = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images")
PREP = Preprocessing(image_size=24, resize_size=28)


def _files(tmp_path, num_classes=3, per_class=4, bad=True):
    """CUB photos of `num_classes` species, plus (with `bad`) a truncated JPEG and a
    missing file in class 0."""
    paths, labels = [], []
    for c, folder in enumerate(sorted(glob.glob(os.path.join(IMAGES, "*")))[:num_classes]):
        found = sorted(glob.glob(os.path.join(folder, "*.jpg")))[:per_class]
        paths += found
        labels += [c] * len(found)
    if bad:
        truncated = tmp_path / "truncated.jpg"
        truncated.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 20)
        paths += [str(truncated), str(tmp_path / "missing.jpg")]
        labels += [0, 0]
    return paths, np.array(labels)


def _source(paths, labels, **options):
    return make_source(as_data((paths, labels), SAMPLES, "data"), **options)


@pytest.mark.shared_data
def test_held_images_give_the_values_of_decoding_again(tmp_path):
    paths, labels = _files(tmp_path)
    held = _source(paths, labels, preprocessing=PREP)
    fresh = _source(paths, labels, preprocessing=PREP, decoded_cache_mb=0)
    assert held.holds_decoded and not fresh.holds_decoded
    bad = {len(paths) - 2, len(paths) - 1}
    rng = np.random.default_rng(0)
    for step in range(5):  # draws repeat: later ones read the held copies
        indices = tf.constant(rng.integers(0, len(paths), 16), tf.int64)
        seed = tf.constant([7, step], tf.int64)
        x_held, ok_held = held.fetch(indices, seed)
        x_fresh, ok_fresh = fresh.fetch(indices, seed)
        np.testing.assert_array_equal(x_held.numpy(), x_fresh.numpy())
        expected_ok = [int(i) not in bad for i in indices.numpy()]
        assert ok_held.numpy().tolist() == expected_ok == ok_fresh.numpy().tolist()


@pytest.mark.shared_data
def test_a_file_is_read_once_then_served_from_memory(tmp_path):
    originals, labels = _files(tmp_path, 2, 2, bad=False)
    paths = []
    for i, original in enumerate(originals):
        paths.append(str(tmp_path / f"{i}.jpg"))
        with open(original, "rb") as src, open(paths[-1], "wb") as dst:
            dst.write(src.read())
    source = _source(paths, labels, preprocessing=PREP)
    indices = tf.range(len(paths), dtype=tf.int64)
    seed = tf.constant([1, 2], tf.int64)
    before, ok = source.fetch(indices, seed)
    assert ok.numpy().all()
    for path in paths:
        os.remove(path)
    after, ok = source.fetch(indices, seed)
    assert ok.numpy().all()
    np.testing.assert_array_equal(after.numpy(), before.numpy())
    _, ok = _source(paths, labels, preprocessing=PREP, decoded_cache_mb=0).fetch(indices, seed)
    assert not ok.numpy().any()


@pytest.mark.shared_data
def test_unseeded_draws_are_augmented_images_of_the_right_shape(tmp_path):
    paths, labels = _files(tmp_path, bad=False)
    source = _source(paths, labels, preprocessing=PREP)
    indices = tf.constant([0, 1, 0, 1], tf.int64)
    first, _ = source.fetch(indices, None)
    second, ok = source.fetch(indices, None)
    assert second.shape == (4, 24, 24, 3) and ok.numpy().all()
    assert 0.0 <= float(tf.reduce_min(second)) and float(tf.reduce_max(second)) <= 1.0
    assert not np.array_equal(first.numpy(), second.numpy())  # random crops and flips


@pytest.mark.shared_data
def test_streams_are_equal_with_and_without_the_held_images(tmp_path):
    paths, labels = _files(tmp_path, bad=False)
    streams = [class_balanced_batches((paths, labels), 3, 2, seed=5, preprocessing=PREP,
                                      decoded_cache_mb=mb) for mb in (DECODED_CACHE_MB, 0)]
    for (xa, ya), (xb, yb) in zip(*(s.take(8).as_numpy_iterator() for s in streams)):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


@pytest.mark.shared_data
def test_images_are_held_only_when_all_fit_in_the_budget(tmp_path):
    paths, labels = _files(tmp_path, bad=False)
    needed = len(paths) * resized_bytes(PREP) / 2**20  # 12 images of 28 x 28 x 3 floats
    assert not _source(paths, labels, preprocessing=PREP,
                       decoded_cache_mb=int(needed)).holds_decoded
    assert _source(paths, labels, preprocessing=PREP,
                   decoded_cache_mb=int(needed) + 1).holds_decoded
    assert not _source(paths, labels, preprocessing=PREP, training=False).holds_decoded
    resized_crop = Preprocessing(image_size=24, resize_size=28, crop="random_resized")
    assert not _source(paths, labels, preprocessing=resized_crop).holds_decoded
    images = np.zeros((4, 8, 8, 1), np.uint8)
    assert not _source(images, np.arange(4), preprocessing=PREP).holds_decoded


@pytest.mark.shared_data
def test_held_images_work_inside_a_strategy_scope(tmp_path, mirrored_strategy):
    paths, labels = _files(tmp_path, bad=False)
    expected = next(iter(class_balanced_batches((paths, labels), 2, 2, seed=1,
                                                preprocessing=PREP, num_replicas=2)))
    with mirrored_strategy.scope():  # a variable would be mirrored there; the tables are not
        stream = class_balanced_batches((paths, labels), 2, 2, seed=1, preprocessing=PREP)
    np.testing.assert_array_equal(next(iter(stream))[0].numpy(), expected[0].numpy())


@pytest.mark.parametrize("value", [-1, 1.5, "big", True])
def test_a_budget_that_is_not_a_count_of_mib_is_refused(value):
    with pytest.raises(ValueError, match="decoded_cache_mb"):
        _source(np.zeros((2, 4, 4, 1), np.uint8), np.arange(2), decoded_cache_mb=value)


def test_the_command_line_default_is_the_library_default():
    assert TrainConfig().decoded_cache_mb == DECODED_CACHE_MB
