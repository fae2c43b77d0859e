import glob
import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras_dml
from keras_dml.data import (ClassBalancedSampler, Preprocessing, class_balanced_batches,
                            verify_images)
from keras_dml.datasets.base import labeled_from_raw
from keras_dml.evaluation.embedding import as_dataset

from conftest import SHARED_DATASETS

CUB = os.path.join(SHARED_DATASETS, "cub200_subset", "CUB_200_2011")


def _cub_files(num_classes=4, per_class=6):
    folders = sorted(glob.glob(os.path.join(CUB, "images", "*")))[:num_classes]
    paths, labels = [], []
    for c, folder in enumerate(folders):
        for path in sorted(glob.glob(os.path.join(folder, "*.jpg")))[:per_class]:
            paths.append(path)
            labels.append(c)
    return paths, np.array(labels)


def _check_batch(y, classes, k):
    y = y.reshape(classes, k)
    assert (y == y[:, :1]).all(), "batch is not class-major"
    assert len(np.unique(y[:, 0])) == classes


def test_in_memory_batches_are_c_by_k_with_distinct_samples():
    rng = np.random.default_rng(0)
    y = np.repeat(np.arange(12), rng.integers(3, 9, 12))
    x = np.arange(len(y), dtype=np.float32)[:, None]  # x encodes the index
    ds = class_balanced_batches((x, y), 4, 3, seed=1)
    for xb, yb in ds.take(60).as_numpy_iterator():
        _check_batch(yb, 4, 3)
        idx = xb[:, 0].astype(int)
        assert len(set(idx)) == 12
        np.testing.assert_array_equal(y[idx], yb)


def test_same_seed_same_stream_other_seed_differs():
    x, y = load_digits_train()
    a = [yb for _, yb in class_balanced_batches((x, y), 3, 2, seed=5).take(5).as_numpy_iterator()]
    b = [yb for _, yb in class_balanced_batches((x, y), 3, 2, seed=5).take(5).as_numpy_iterator()]
    c = [yb for _, yb in class_balanced_batches((x, y), 3, 2, seed=6).take(5).as_numpy_iterator()]
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_keras_dml_pipelines_run_without_the_tf_data_autotuner():
    x, y = load_digits_train()
    split = keras_dml.datasets.load("digits").test
    streams = [class_balanced_batches((x, y), 3, 2, seed=0),
               keras_dml.data.two_view_batches(x, lambda v: v, 4, seed=0),
               keras_dml.data.evaluation_batches(split),
               as_dataset((x, y), batch_size=8)]
    for stream in streams:
        assert stream.options().autotune.enabled is False
    assert next(iter(streams[0]))[1].shape == (6,)  # parallel map still works


def load_digits_train():
    split = keras_dml.datasets.load("digits").train
    return split.images, split.labels


def test_labeled_images_and_tf_dataset_sources():
    split = keras_dml.datasets.load("digits").train
    xb, yb = next(iter(class_balanced_batches(split, 5, 4, seed=0)))
    assert xb.shape == (20, 8, 8, 1) and yb.dtype == tf.int32
    ds = tf.data.Dataset.from_tensor_slices((split.images[:200], split.labels[:200]))
    xb2, yb2 = next(iter(class_balanced_batches(ds, 5, 4, seed=0)))
    _check_batch(yb2.numpy(), 5, 4)
    # Each returned image is the one of its label.
    for image, label in zip(xb2.numpy(), yb2.numpy()):
        match = np.flatnonzero((split.images[:200] == image).all(axis=(1, 2, 3)))
        assert label in split.labels[:200][match]


def test_dataset_of_variable_size_images_needs_encoding():
    ds = tf.data.Dataset.from_generator(
        lambda: ((np.zeros((h, 5, 3), np.uint8), i % 2) for i, h in enumerate([4, 6, 4, 6])),
        output_signature=(tf.TensorSpec([None, 5, 3], tf.uint8), tf.TensorSpec([], tf.int64)))
    with pytest.raises(ValueError, match="SkipDecoding"):
        class_balanced_batches(ds, 2, 2)


@pytest.mark.shared_data
def test_encoded_string_dataset_is_decoded_lazily():
    paths, labels = _cub_files(3, 4)
    encoded = [open(p, "rb").read() for p in paths]
    ds = tf.data.Dataset.from_tensor_slices((encoded, labels))
    prep = Preprocessing(image_size=32, resize_size=40)
    xb, yb = next(iter(class_balanced_batches(ds, 3, 2, seed=0, preprocessing=prep)))
    assert xb.shape == (6, 32, 32, 3)
    _check_batch(yb.numpy(), 3, 2)


@pytest.mark.shared_data
def test_files_eval_mode_gives_exact_preprocessed_images():
    paths, labels = _cub_files(2, 3)
    prep = Preprocessing(image_size=32, resize_size=40)
    ds = class_balanced_batches((paths, labels), 2, 3, seed=0, preprocessing=prep,
                                training=False)
    xb, yb = next(iter(ds))
    expected = {prep.eval(tf.io.decode_jpeg(tf.io.read_file(p))).numpy().tobytes()
                for p in paths}
    assert {x.tobytes() for x in xb.numpy()} == expected


@pytest.mark.shared_data
def test_training_augmentation_is_seeded():
    paths, labels = _cub_files(2, 3)
    prep = Preprocessing(image_size=32, resize_size=40)
    a = next(iter(class_balanced_batches((paths, labels), 2, 2, seed=3, preprocessing=prep)))
    b = next(iter(class_balanced_batches((paths, labels), 2, 2, seed=3, preprocessing=prep)))
    np.testing.assert_array_equal(a[0].numpy(), b[0].numpy())


@pytest.mark.shared_data
def test_bad_files_skipped_on_request_each_named_once(tmp_path, capfd):
    paths, labels = _cub_files(3, 4)
    truncated = tmp_path / "truncated.jpg"
    truncated.write_bytes(b"\xff\xd8\xff\xe0" + b"\x00" * 20)
    paths = paths + [str(tmp_path / "missing.jpg"), str(truncated)]
    labels = np.concatenate([labels, [0, 1]])
    prep = Preprocessing(image_size=16, resize_size=20)
    ds = class_balanced_batches((paths, labels), 3, 2, seed=0, preprocessing=prep,
                                skip_bad_images=True)
    seen = 0
    for xb, yb in ds.take(30).as_numpy_iterator():
        _check_batch(yb, 3, 2)
        seen += 1
    assert seen == 30
    err = capfd.readouterr().err
    assert err.count("keras_dml.data: skipped ") == 2, err  # each bad file once, in 30 batches
    assert "truncated.jpg" in err and "missing.jpg" in err


@pytest.mark.shared_data
def test_verify_images_drops_undecodable_files(tmp_path):
    paths, labels = _cub_files(2, 3)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    split = labeled_from_raw(np.concatenate([labels, [1]]), paths=paths + [str(bad)])
    with pytest.warns(UserWarning, match="1 of 7 images cannot be decoded"):
        clean = verify_images(split)
    assert len(clean) == 6 and clean.skipped == [(str(bad), "undecodable")]


@pytest.mark.shared_data
def test_verify_images_takes_paths_and_path_label_pairs(tmp_path):
    paths, labels = _cub_files(2, 2)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    with pytest.warns(UserWarning, match="1 of 5 images cannot be decoded.*bad.jpg"):
        assert verify_images(paths + [str(bad)]) == paths
    with pytest.warns(UserWarning, match="1 of 5 images"):
        kept, kept_labels = verify_images((paths[:2] + [str(bad)] + paths[2:],
                                           np.array([0, 0, 9, 1, 1])))
    assert kept == paths and kept_labels.tolist() == [0, 0, 1, 1]
    assert verify_images((paths, labels)) == (paths, labels)  # all good: unchanged
    arrays = (np.zeros((2, 4, 4, 1), np.float32), np.array([0, 1]))
    assert verify_images(arrays) is arrays  # in memory: nothing to decode
    with pytest.raises(ValueError, match="ignore_errors"):
        verify_images(tf.data.Dataset.from_tensor_slices(arrays))


@pytest.mark.shared_data
def test_class_names_as_labels_become_sorted_ids():
    paths, labels = _cub_files(2, 2)
    names = np.array(["wren", "wren", "auk", "auk"])
    batches = class_balanced_batches((paths, names), 2, 2, seed=0,
                                     preprocessing=Preprocessing(16))
    x, y = next(iter(batches))
    assert x.shape == (4, 16, 16, 3)
    ids = dict(zip(paths, y.numpy()))
    assert [ids[p] for p in paths] == [1, 1, 0, 0]  # auk 0, wren 1
    x = np.zeros((4, 2, 2, 1), np.float32)
    _, y = next(iter(class_balanced_batches((x, ["b", "a", "b", "a"]), 2, 2, seed=0)))
    assert sorted(y.numpy().tolist()) == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="integer class ids or of class names.*np.unique"):
        class_balanced_batches((x, np.array([0.5, 1.0, 0.5, 1.0])), 2, 2)


def test_small_classes_option_and_errors():
    y = np.array([0, 0, 0, 1, 1, 1, 2, 3, 3, 3])
    x = np.arange(len(y), dtype=np.float32)
    with pytest.warns(UserWarning, match="1 of 4 classes"):
        ds = class_balanced_batches((x, y), 3, 2, small_classes="drop", seed=0)
    for _, yb in ds.take(20).as_numpy_iterator():
        assert 2 not in yb
    with pytest.warns(UserWarning, match="drawn with replacement"):
        ds = class_balanced_batches((x, y), 4, 2, seed=0)
    for _, yb in ds.take(5).as_numpy_iterator():
        _check_batch(yb, 4, 2)
    with pytest.raises(ValueError, match="usable"):
        class_balanced_batches((x, y), 4, 2, small_classes="drop")
    with pytest.raises(ValueError, match="divisible"):
        class_balanced_batches((x, y), 3, 2, num_replicas=2)
    with pytest.raises(ValueError, match="must match"):
        class_balanced_batches((x, y[:-1]), 2, 2)
    with pytest.raises(ValueError, match="data must be"):
        class_balanced_batches("not a source", 2, 2)


def test_map_fn_applies_per_batch():
    x, y = load_digits_train()
    ds = class_balanced_batches((x, y), 2, 2, seed=0, map_fn=lambda a, b: (a * 0 + 7, b))
    xb, _ = next(iter(ds))
    assert float(tf.reduce_min(xb)) == 7.0


def test_a_map_fn_with_a_step_parameter_gets_each_batch_step():
    x, y = load_digits_train()

    def steps(a, b, step):
        return a * 0 + tf.cast(step, a.dtype), b

    ds = class_balanced_batches((x, y), 2, 2, seed=0, map_fn=steps, start_step=5)
    assert [float(xb.max()) for xb, _ in ds.take(4).as_numpy_iterator()] == [5, 6, 7, 8]


def test_jittered_batches_repeat_with_the_seed_in_the_parallel_map():
    """tf.data maps batches in parallel threads: `AffineJitter` keyed on (seed, step)
    gives the same batches run after run, from any start step."""
    from keras_dml.data import AffineJitter

    x, y = load_digits_train()
    x = x.astype("float32").reshape(len(x), 8, 8, 1)

    def batches(seed, start_step=0):
        jitter = AffineJitter(shift=1.0, rotation=15.0, scale=0.2, seed=seed)
        stream = class_balanced_batches((x, y), 4, 4, seed=0, start_step=start_step,
                                        map_fn=lambda a, b, step: (jitter(a, step), b))
        return np.stack([xb for xb, _ in stream.take(6).as_numpy_iterator()])

    first = batches(seed=3)
    np.testing.assert_array_equal(first, batches(seed=3))
    np.testing.assert_array_equal(batches(seed=3, start_step=2)[:4], first[2:])
    assert not np.array_equal(first, batches(seed=4))  # the same images, other draws


@pytest.mark.slow
def test_mirrored_strategy_each_replica_gets_whole_classes():
    script = textwrap.dedent("""
        import numpy as np, tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        from keras_dml.data import class_balanced_batches
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        y = np.repeat(np.arange(10), 4)
        x = np.arange(40, dtype=np.float32)
        with strategy.scope():
            ds = class_balanced_batches((x, y), 4, 3, seed=0)
        dist = strategy.experimental_distribute_dataset(ds)
        for step, (xb, yb) in zip(range(5), dist):
            parts = [t.numpy() for t in strategy.experimental_local_results(yb)]
            assert all(p.shape == (6,) for p in parts), [p.shape for p in parts]
            for p in parts:
                assert (p.reshape(2, 3) == p.reshape(2, 3)[:, :1]).all()
            full = np.concatenate(parts)
            assert len(set(full)) == 4
        print("OK")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.stdout.strip().endswith("OK"), out.stderr[-2000:]


@pytest.mark.parametrize("small_classes,start_step", [("replace", 0), ("drop", 9)])
def test_tf_data_and_numpy_streams_give_the_same_batches(small_classes, start_step):
    """`class_balanced_batches` (tf.data, TF ops) and `ClassBalancedPyDataset` (NumPy)
    deliver the same (x, y) batch by batch for the same seed, over several epochs."""
    from keras_dml.data import ClassBalancedPyDataset

    rng = np.random.default_rng(4)
    y = np.repeat(np.arange(17) * 3, rng.integers(1, 9, 17))  # some classes below k
    x = rng.integers(0, 255, (len(y), 5, 5, 1), dtype=np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stream = class_balanced_batches((x, y), 5, 3, small_classes=small_classes, seed=21,
                                        start_step=start_step)
        arrays = ClassBalancedPyDataset(x, y, 5, 3, small_classes=small_classes, seed=21,
                                        start_step=start_step)
    steps = 4 * arrays.sampler.batches_per_epoch
    for i, (xb, yb) in enumerate(stream.take(steps)):
        expected_x, expected_y = arrays[i]
        np.testing.assert_array_equal(yb.numpy(), expected_y, err_msg=f"batch {i}")
        np.testing.assert_array_equal(xb.numpy(), expected_x, err_msg=f"batch {i}")


def test_sampler_batch_in_tf_ops_equals_numpy_batch():
    y = np.repeat(np.arange(40), np.random.default_rng(1).integers(1, 12, 40))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sampler = ClassBalancedSampler(y, 8, 4, seed=5)
    batch = tf.function(sampler.batch)
    for step in (0, 1, 4, 5, 99, 12345, 2 ** 32 + 7, 2 ** 40):
        np.testing.assert_array_equal(batch(tf.constant(step, tf.int64)).numpy(),
                                      sampler.numpy_batch(step), err_msg=f"step {step}")
