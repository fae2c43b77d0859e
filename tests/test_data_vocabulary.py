"""The data functions take the user's input as `data=`; the old keywords (`source=`,
`split=`, `dataset=`) still work, with a DeprecationWarning naming `data=`."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_dml import data
from keras_dml.data import GroupDesign

X = np.arange(12 * 4 * 4, dtype=np.float32).reshape(12, 4, 4, 1) / 100.0
Y = np.repeat(np.arange(4), 3)


def _batches(dataset, count=2):
    """The first `count` batches of `dataset` as NumPy `(x, y)` pairs."""
    return [(np.asarray(x), np.asarray(y)) for x, y in dataset.take(count)]


def _distributed(keyword, value):
    stream = data.distributed_class_balanced_batches(tf.distribute.get_strategy(),
                                                     **{keyword: value}, classes_per_batch=2,
                                                     samples_per_class=2, seed=0)
    x, y = next(iter(stream))
    return [(np.asarray(x), np.asarray(y))]


def _mining_representatives(keyword, value):
    _, sampler = data.hard_negative_class_batches((X, Y), 2, 2, seed=0)
    callback = data.HardNegativeClassMining(sampler, **{keyword: value}, seed=0)
    callback.set_model(keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Flatten()]))
    return callback.class_representatives()


# name: (old keyword, call(keyword, value) -> comparable result)
CALLS = {
    "class_balanced_batches": ("source", lambda k, v: _batches(
        data.class_balanced_batches(**{k: v}, classes_per_batch=2, samples_per_class=2,
                                    seed=0))),
    "design_batches": ("source", lambda k, v: _batches(
        data.design_batches(**{k: v}, design=GroupDesign(m=2, n=2), seed=0))),
    "distributed_class_balanced_batches": ("source", _distributed),
    "hard_negative_class_batches": ("source", lambda k, v: _batches(
        data.hard_negative_class_batches(**{k: v}, classes_per_batch=2, seed=0)[0])),
    "HardNegativeClassMining": ("source", _mining_representatives),
    "two_view_batches": ("source", lambda k, v: _batches(
        data.two_view_batches(**{k: v}, augment=lambda images: images + 1.0,
                              instances_per_batch=3, seed=0))),
    "evaluation_batches": ("split", lambda k, v: _batches(
        data.evaluation_batches(**{k: v}, batch_size=5), count=3)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_old_keyword_warns_and_gives_what_data_gives(name):
    old, call = CALLS[name]
    expected = call("data", (X, Y))
    with pytest.deprecated_call(match=f"{old}= is deprecated and removed in 0.3: use data="):
        got = call(old, (X, Y))
    for want, have in zip(expected, got, strict=True):
        for a, b in zip(want, have, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_data_and_its_old_keyword_together_are_refused(name):
    old, _ = CALLS[name]
    call = {"class_balanced_batches": lambda **kw: data.class_balanced_batches(
                classes_per_batch=2, samples_per_class=2, **kw),
            "design_batches": lambda **kw: data.design_batches(
                design=GroupDesign(m=2, n=2), **kw),
            "distributed_class_balanced_batches": lambda **kw:
                data.distributed_class_balanced_batches(
                    tf.distribute.get_strategy(), classes_per_batch=2, samples_per_class=2,
                    seed=0, **kw),
            "hard_negative_class_batches": lambda **kw: data.hard_negative_class_batches(
                classes_per_batch=2, **kw),
            "HardNegativeClassMining": lambda **kw: data.HardNegativeClassMining(None, **kw),
            "two_view_batches": lambda **kw: data.two_view_batches(
                augment=lambda images: images, instances_per_batch=3, **kw),
            "evaluation_batches": data.evaluation_batches}[name]
    with pytest.raises(ValueError, match=f"Give data= only \\({old}= is its deprecated name\\)"):
        call(data=(X, Y), **{old: (X[:6], Y[:6])})


def test_verify_images_takes_source_as_a_deprecated_name(tmp_path):
    good = tmp_path / "good.png"
    good.write_bytes(tf.io.encode_png(np.zeros((4, 4, 3), np.uint8)).numpy())
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    files = ([str(good), str(bad)], np.array([0, 1]))
    with pytest.warns(UserWarning, match="1 of 2 images cannot be decoded"):
        expected = data.verify_images(data=files)
    with pytest.deprecated_call(match="source= is deprecated and removed in 0.3: use data="):
        with pytest.warns(UserWarning, match="1 of 2 images cannot be decoded"):
            got = data.verify_images(source=files)
    assert got[0] == expected[0] == [str(good)]
    np.testing.assert_array_equal(got[1], expected[1])
    with pytest.raises(ValueError, match="Give data= only"):
        data.verify_images(data=files, source=([str(good)], np.array([0])))


def test_stream_position_takes_dataset_as_a_deprecated_name():
    stream = data.class_balanced_batches((X, Y), 2, 2, seed=0)
    position = data.stream_position(data=stream)
    assert position is not None and position.seed == 0
    with pytest.deprecated_call(match="dataset= is deprecated and removed in 0.3: use data="):
        assert data.stream_position(dataset=stream) is position
    with pytest.raises(ValueError, match="Give data= only"):
        data.stream_position(data=stream, dataset=tf.data.Dataset.range(2))


def test_positional_data_with_its_old_keyword_is_a_type_error():
    with pytest.raises(TypeError, match="multiple values for argument 'data'"):
        with pytest.deprecated_call(match="source= is deprecated"):
            data.class_balanced_batches((X, Y), 2, 2, source=(X, Y))


def test_unsupported_data_is_named_data():
    with pytest.raises(ValueError, match="^data must be"):
        data.evaluation_batches("not data")
