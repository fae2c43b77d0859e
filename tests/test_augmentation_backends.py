"""The training augmentation on the running Keras backend (TensorFlow, JAX or PyTorch):
the batches `keras-dml train` feeds the model, from image files (decoded by tf.data on
every backend) and from in-memory arrays, are jittered when `--augment-shift`,
`--augment-rotation`, `--augment-scale` or `--augment-crop` asks and untouched when
nothing does, the same for the same seed, and the same from a later start step (what a
resumed run replays)."""

import numpy as np
import pytest
from PIL import Image

from keras_dml import backend, data, datasets
from keras_dml.data import AffineJitter
from keras_dml.training import inputs
from keras_dml.training import job as training_job
from keras_dml.training.config import TrainConfig, own_files_options

CLASSES, PER_CLASS, STEPS = 4, 3, 2
JITTER = {"augment_shift": 2.0, "augment_rotation": 20.0, "augment_scale": 0.3}

pytestmark = [pytest.mark.backend_neutral,
              pytest.mark.requires("tensorflow")]  # tf.data decodes the image files


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


def _config(tmp_path, **settings):
    return TrainConfig(**{"image_size": 16, "width": 4, "embedding_dim": 8,
                          "classes_per_batch": 2, "samples_per_class": 2, "epochs": 1,
                          "steps_per_epoch": STEPS, "runs_dir": str(tmp_path / "runs"),
                          "export": False, "plots": False, **settings})


def _stream(config):
    """The training stream of `config`, made as `keras-dml train` makes it (without
    its model: `_job` builds that too)."""
    splits = datasets.load(config.dataset, data_dir=config.data_dir,
                           **own_files_options(config.dataset, config.test_classes))
    shape, preprocessing = inputs.input_spec(splits.train, config.image_size,
                                             config.backbone, config.augment_crop)
    transform = None if preprocessing else inputs.array_transform(splits.train, shape)
    return splits.train, preprocessing, inputs.training_batches(
        inputs.strategy_for(config.strategy), splits.train, config, preprocessing,
        inputs.augmented(transform, config, shape))


def _job(tmp_path, **settings):
    """The batches of the prepared run of `settings`: those `keras-dml train` feeds its
    model."""
    return training_job._prepare(_config(tmp_path, **settings), resume=False).batches


def _images(batches, start=0):
    """The images of the first `STEPS` batches of a training stream, from `start`."""
    if isinstance(batches, data.ClassBalancedPyDataset):
        batches.start_step = start
        return np.stack([batches[i][0] for i in range(STEPS)])
    data.stream_position(batches).start = start
    return np.stack([x for x, _ in batches.take(STEPS).as_numpy_iterator()])


def test_file_batches_are_jittered_when_asked_reproducibly_from_any_start(photos, tmp_path):
    assert inputs.augmented(None, _config(tmp_path)) is None  # no flag: the stream as it is
    split, preprocessing, stream = _stream(_config(tmp_path, dataset="folder",
                                                   data_dir=photos, **JITTER))
    jittered = _images(stream)
    assert jittered.shape == (STEPS, 4, 16, 16, 3)
    plain = data.class_balanced_batches(split, 2, 2, seed=0, preprocessing=preprocessing,
                                        num_replicas=1)
    assert np.abs(jittered - _images(plain)).mean() > 0.02  # of pixels in [0, 1]
    later = _images(stream, start=1)  # a resumed stream: batch 1 comes first
    np.testing.assert_array_equal(later[0], jittered[1])


@pytest.mark.slow  # a model and a stream each
@pytest.mark.parametrize("flag", [{"augment_shift": 2.0}, {"augment_rotation": 20.0},
                                  {"augment_scale": 0.3}, {"augment_crop": "random_resized"}],
                         ids=lambda flag: next(iter(flag)))
def test_each_flag_changes_the_file_batches_fed_to_the_model(flag, photos, tmp_path):
    plain = _images(_job(tmp_path / "plain", dataset="folder", data_dir=photos))
    changed = _images(_job(tmp_path / "flag", dataset="folder", data_dir=photos, **flag))
    assert np.abs(changed - plain).mean() > 0.02


@pytest.mark.slow  # three streams
def test_jittered_file_batches_repeat_with_the_seed_only(photos, tmp_path):
    first, again, other = (_images(_stream(_config(
        tmp_path, dataset="folder", data_dir=photos, seed=seed, **JITTER))[2])
        for seed in (0, 0, 1))
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)


@pytest.mark.slow  # three runs' models and streams
def test_in_memory_batches_are_jittered_reproducibly_from_any_start(tmp_path):
    plain = _images(_job(tmp_path / "plain", dataset="digits", image_size=None))
    stream = _job(tmp_path / "a", dataset="digits", image_size=None, **JITTER)
    jittered = _images(stream)
    assert np.abs(jittered - plain).mean() > 0.02
    again = _images(_job(tmp_path / "b", dataset="digits", image_size=None, **JITTER))
    np.testing.assert_array_equal(jittered, again)
    np.testing.assert_array_equal(_images(stream, start=1)[0], jittered[1])


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
