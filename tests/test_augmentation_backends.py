"""The training augmentation on the running Keras backend (TensorFlow, JAX or PyTorch):
the batches `keras-dml train` feeds the model, from image files (decoded by tf.data on
every backend) and from in-memory arrays, are jittered when `--augment-shift`,
`--augment-rotation`, `--augment-scale` or `--augment-crop` asks and untouched when
nothing does, the same for the same seed, and the same from a later start step (what a
resumed run replays)."""

import numpy as np
import pytest
from PIL import Image

from keras_dml import backend, data
from keras_dml.data import AffineJitter
from keras_dml.training import job as training_job
from keras_dml.training.config import TrainConfig

CLASSES, PER_CLASS, STEPS = 4, 3, 3
FLAGS = [{"augment_shift": 2.0}, {"augment_rotation": 20.0}, {"augment_scale": 0.3}]
JITTER = {"augment_shift": 2.0, "augment_rotation": 20.0, "augment_scale": 0.3}

pytestmark = pytest.mark.requires("tensorflow")  # tf.data decodes the image files


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """`root/<class>/<n>.png`: 3 random colour images of 4 classes each, 24 px."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(0)
    for c in range(CLASSES):
        (root / f"class{c}").mkdir()
        for n in range(PER_CLASS):
            pixels = rng.integers(0, 256, (24, 24, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / f"class{c}" / f"{n}.png")
    return str(root)


def _job(tmp_path, **settings):
    """The prepared run of `settings` (its data, model and training stream), as
    `keras-dml train` prepares it."""
    config = TrainConfig(**{"image_size": 16, "width": 4, "embedding_dim": 8,
                            "classes_per_batch": 2, "samples_per_class": 2, "epochs": 1,
                            "steps_per_epoch": STEPS, "runs_dir": str(tmp_path / "runs"),
                            "export": False, "plots": False, **settings})
    return training_job._prepare(config, resume=False)


def _images(batches, start=0):
    """The images of the first `STEPS` batches of a training stream, from `start`."""
    if isinstance(batches, data.ClassBalancedPyDataset):
        batches.start_step = start
        return np.stack([batches[i][0] for i in range(STEPS)])
    data.stream_position(batches).start = start
    return np.stack([x for x, _ in batches.take(STEPS).as_numpy_iterator()])


def _files(photos, tmp_path, **settings):
    return _images(_job(tmp_path, dataset="folder", data_dir=photos, **settings).batches)


@pytest.fixture(scope="module")
def plain(photos, tmp_path_factory):
    """The file batches without any flag (cnn3: random crops of the resized images)."""
    return _files(photos, tmp_path_factory.mktemp("plain"))



@pytest.mark.parametrize("flag", FLAGS, ids=lambda flag: next(iter(flag)))
def test_each_flag_jitters_the_file_batches_fed_to_the_model(flag, photos, plain, tmp_path):
    jittered = _files(photos, tmp_path, **flag)
    assert jittered.shape == plain.shape == (STEPS, 4, 16, 16, 3)
    assert np.abs(jittered - plain).mean() > 0.02  # of pixels in [0, 1]


def test_without_a_flag_the_file_batches_are_the_plain_stream(photos, plain, tmp_path):
    job = _job(tmp_path, dataset="folder", data_dir=photos, augment_crop="random_resized")
    assert np.abs(_images(job.batches) - plain).mean() > 0.02  # the crop flag applies
    unjittered = data.class_balanced_batches(job.splits.train, 2, 2, seed=0,
                                             preprocessing=job.preprocessing, num_replicas=1)
    np.testing.assert_array_equal(_images(job.batches), _images(unjittered))


def test_jittered_file_batches_repeat_with_the_seed_and_from_a_later_start(photos, tmp_path):
    first = _job(tmp_path / "a", dataset="folder", data_dir=photos, **JITTER).batches
    whole = _images(first)
    again = _files(photos, tmp_path / "b", **JITTER)
    np.testing.assert_array_equal(whole, again)
    other = _files(photos, tmp_path / "c", seed=1, **JITTER)
    assert not np.array_equal(whole, other)
    later = _images(first, start=1)  # a resumed stream: batch 1 comes first
    np.testing.assert_array_equal(later[:-1], whole[1:])


def test_in_memory_batches_are_jittered_reproducibly_from_any_start(tmp_path):
    plain = _images(_job(tmp_path / "plain", dataset="digits", image_size=None).batches)
    stream = _job(tmp_path / "a", dataset="digits", image_size=None, **JITTER).batches
    jittered = _images(stream)
    assert np.abs(jittered - plain).mean() > 0.02
    again = _images(_job(tmp_path / "b", dataset="digits", image_size=None, **JITTER).batches)
    np.testing.assert_array_equal(jittered, again)
    np.testing.assert_array_equal(_images(stream, start=1)[:-1], jittered[1:])


def _blob(size=15):
    x = np.zeros((8, size, size, 1), np.float32)
    x[:, 6:9, 6:9] = 1.0  # a square at the centre
    return x


def _centroids(images):
    ys, xs = np.mgrid[:images.shape[1], :images.shape[2]]
    mass = images[..., 0].sum(axis=(1, 2))
    return np.stack([(images[..., 0] * xs).sum(axis=(1, 2)) / mass,
                     (images[..., 0] * ys).sum(axis=(1, 2)) / mass], axis=1)


@pytest.mark.parametrize("road", ["numpy", "tensorflow"])
def test_the_jitter_moves_turns_and_zooms_within_its_bounds(road):
    def apply(jitter):
        if road == "numpy":
            return jitter(_blob(), step=4)
        tf = backend.require_tensorflow("the test")
        return jitter(tf.constant(_blob()), step=tf.constant(4, tf.int64)).numpy()

    moved = _centroids(apply(AffineJitter(shift=3.0, seed=1))) - 7.0
    assert np.abs(moved).max() <= 3.0 + 1e-3 and np.abs(moved).max() > 0.5
    turned = apply(AffineJitter(rotation=30.0, seed=1))
    np.testing.assert_allclose(_centroids(turned), 7.0, atol=1e-3)  # about the centre
    zoomed = apply(AffineJitter(scale=0.4, seed=1)).sum(axis=(1, 2, 3)) / 9.0  # 1 / zoom^2
    assert (zoomed >= 0.9 / 1.4**2).all() and (zoomed <= 1.1 / 0.6**2).all()
    assert zoomed.std() > 0.05  # each image its own zoom
