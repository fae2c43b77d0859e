import os

import numpy as np
import pytest
import tensorflow as tf

from keras_dml.data import Preprocessing, decode_image, register_normalization

from conftest import SHARED_DATASETS

CUB_IMAGE = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011", "images",
                         "001.Black_footed_Albatross", "0000.jpg")


def _image(h=300, w=400, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


@pytest.mark.shared_data
def test_decode_image_real_jpeg_and_png_gray():
    image = decode_image(tf.io.read_file(CUB_IMAGE))
    assert image.dtype == tf.uint8 and image.shape[-1] == 3 and image.shape[0] > 0
    gray = tf.io.encode_png(np.full((5, 7, 1), 9, np.uint8))
    rgb = decode_image(gray, channels=3)
    assert rgb.shape == (5, 7, 3) and int(tf.reduce_max(rgb)) == 9


@pytest.mark.shared_data
def test_decode_image_is_graph_safe():
    fn = tf.function(lambda b: decode_image(b), input_signature=[tf.TensorSpec([], tf.string)])
    assert fn(tf.io.read_file(CUB_IMAGE)).shape[-1] == 3


def test_eval_matches_numpy_resize_then_centre_crop():
    prep = Preprocessing(image_size=4, resize_size=8, normalization="none")
    image = _image(8, 8)  # already resize_size: resize is the identity
    out = prep.eval(image).numpy()
    np.testing.assert_allclose(out, image[2:6, 2:6].astype(np.float32))


@pytest.mark.parametrize("norm,lo,hi", [("unit", 0, 1), ("symmetric", -1, 1),
                                         ("none", 0, 255)])
def test_normalization_ranges(norm, lo, hi):
    prep = Preprocessing(image_size=16, resize_size=16, normalization=norm)
    out = prep.eval(np.stack([np.zeros((16, 16, 3)), np.full((16, 16, 3), 255)]).astype(
        np.uint8)).numpy()
    np.testing.assert_allclose([out[0].min(), out[1].max()], [lo, hi], atol=1e-6)


def test_imagenet_and_caffe_normalisation_values():
    pixel = np.array([[[10, 128, 250]]], np.uint8)
    out = Preprocessing(1, 1, normalization="imagenet").eval(pixel).numpy()[0, 0]
    expected = (pixel[0, 0] / 255.0 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    out = Preprocessing(1, 1, normalization="caffe").eval(pixel).numpy()[0, 0]
    np.testing.assert_allclose(out, [250 - 103.939, 128 - 116.779, 10 - 123.68], rtol=1e-5)


def test_eval_single_and_batch_agree_and_shapes():
    prep = Preprocessing(image_size=227)
    images = np.stack([_image(seed=1), _image(seed=2)])
    batch = prep.eval(images).numpy()
    assert batch.shape == (2, 227, 227, 3) and batch.dtype == np.float32
    np.testing.assert_allclose(prep.eval(images[1]).numpy(), batch[1], rtol=1e-6)


@pytest.mark.parametrize("norm", ["unit", "symmetric", "imagenet", "caffe"])
def test_eval_in_saved_model_graph_is_identical(tmp_path, norm):
    prep = Preprocessing(image_size=32, resize_size=40, normalization=norm)
    module = tf.Module()
    module.f = tf.function(prep.eval, input_signature=[
        tf.TensorSpec([None, None, None, 3], tf.uint8)])
    tf.saved_model.save(module, str(tmp_path))
    restored = tf.saved_model.load(str(tmp_path))
    images = np.stack([_image(50, 70, 3)])
    np.testing.assert_array_equal(restored.f(images).numpy(), prep.eval(images).numpy())


def test_train_is_random_crop_of_resized_image_and_seeded():
    prep = Preprocessing(image_size=6, resize_size=10, normalization="none", flip=False)
    image = _image(10, 10)
    out = prep.train(image, seed=[3, 4]).numpy()
    found = any(np.array_equal(out, image[i:i + 6, j:j + 6].astype(np.float32))
                for i in range(5) for j in range(5))
    assert found
    np.testing.assert_array_equal(out, prep.train(image, seed=[3, 4]).numpy())
    crops = {prep.train(image, seed=[s, 0]).numpy().tobytes() for s in range(20)}
    assert len(crops) > 3


def test_train_flip_happens_for_some_seeds_and_batches_differ_per_image():
    prep = Preprocessing(image_size=8, resize_size=8, normalization="none")
    image = _image(8, 8)
    outs = [prep.train(image, seed=[s, 1]).numpy() for s in range(12)]
    flipped = [np.array_equal(o, image[:, ::-1].astype(np.float32)) for o in outs]
    same = [np.array_equal(o, image.astype(np.float32)) for o in outs]
    assert any(flipped) and any(same) and all(f or s for f, s in zip(flipped, same))
    batch = prep.train(np.stack([image] * 8), seed=[0, 0]).numpy()
    assert len({b.tobytes() for b in batch}) == 2


def test_pad_mode_keeps_aspect_ratio():
    prep = Preprocessing(image_size=8, resize_size=8, normalization="none", resize_mode="pad")
    out = prep.eval(np.full((4, 8, 3), 200, np.uint8)).numpy()
    assert out[0].max() == 0 and out[4].min() == 200


def test_serialization_roundtrip_and_validation():
    prep = Preprocessing(image_size=227, normalization="imagenet")
    assert Preprocessing.from_dict(prep.to_dict()) == prep
    with pytest.raises(ValueError, match="image_size"):
        Preprocessing(image_size=300, resize_size=256)
    with pytest.raises(ValueError, match="normalization"):
        Preprocessing(normalization="bogus")
    with pytest.raises(ValueError, match="shape"):
        prep.eval(np.zeros((4, 4), np.uint8))
    with pytest.raises(ValueError, match="channels"):
        prep.eval(np.zeros((4, 4, 2), np.uint8))
    with pytest.raises(ValueError, match="Unknown"):
        Preprocessing.from_dict({"size": 3})


def test_register_normalization_hook():
    register_normalization("halves_test", lambda x: x / 510.0)
    prep = Preprocessing(2, 2, normalization="halves_test")
    np.testing.assert_allclose(prep.eval(np.full((2, 2, 3), 255, np.uint8)).numpy(), 0.5)


def test_keras_serialization_roundtrip():
    import keras

    prep = Preprocessing(image_size=227, normalization="imagenet", resize_mode="pad")
    config = keras.saving.serialize_keras_object(prep)
    assert config["registered_name"] == "keras_dml>Preprocessing"
    assert keras.saving.deserialize_keras_object(config) == prep


def test_random_resized_crop_is_seeded_varied_and_serialised():
    prep = Preprocessing(image_size=16, resize_size=18, crop="random_resized",
                         normalization="none")
    image = tf.constant(np.random.default_rng(0).integers(0, 255, (60, 90, 3)), tf.uint8)
    first = prep.train(image, seed=tf.constant([1, 2]))
    assert first.shape == (16, 16, 3)
    np.testing.assert_array_equal(first, prep.train(image, seed=tf.constant([1, 2])))
    crops = [prep.train(image, seed=tf.constant([s, 0])).numpy() for s in range(6)]
    assert len({c.tobytes() for c in crops}) == 6
    batch = prep.train(tf.stack([image] * 3), seed=tf.constant([3, 4]))
    assert batch.shape == (3, 16, 16, 3)
    assert Preprocessing.from_dict(prep.to_dict()) == prep
    assert prep.eval(image).shape == (16, 16, 3)  # evaluation: resize and centre crop
    with pytest.raises(ValueError, match="crop must be one of"):
        Preprocessing(crop="centre")


def test_random_resized_crop_varies_place_and_size():
    # left half black, right half white: crops of different places and sizes have
    # different means, all in [0, 255]
    image = np.zeros((40, 80, 3), np.uint8)
    image[:, 40:] = 255
    prep = Preprocessing(image_size=8, resize_size=8, crop="random_resized", flip=False,
                         normalization="none")
    means = [float(prep.train(image, seed=tf.constant([s, 1])).numpy().mean())
             for s in range(20)]
    assert min(means) >= 0.0 and max(means) <= 255.0
    assert len(set(round(m) for m in means)) > 3  # crops of different places and sizes
