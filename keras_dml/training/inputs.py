"""The run's data: the splits it evaluates, the transform of in-memory images, the
training augmentation and the C x k training stream."""

import dataclasses
import os
import sys
import warnings

import keras
import numpy as np

from keras_dml import backbones, backend, data, datasets
from keras_dml.data.image_errors import skipped_sentence
from keras_dml.data.jitter import AffineJitter
from keras_dml.data.preprocessing import default_preprocessing
from keras_dml.data.transforms import array_transform
from keras_dml.training import distribute
from keras_dml.training.config import FILE_IMAGE_SIZE

__all__ = ["array_transform", "augmentation", "augmented", "evaluation_splits", "input_spec",
           "readable", "skipped_images", "strategy_for", "training_batches", "with_test_dir"]


def with_test_dir(splits, test_dir):
    """`splits` evaluated on the images of `test_dir` (a folder of class folders or a
    CSV path,label list, every class of it a test class) instead of its own test."""
    load = datasets.from_csv if os.path.isfile(test_dir) else datasets.from_directory
    given = load(test_dir, test_classes=0)
    if len(given.test):
        raise ValueError(f"test_dir={test_dir!r} gives its own split (train/ and test/ "
                         "folders, or a split column): give the test images alone, "
                         "DIR/<class>/<image> or a CSV file path,label.")
    return dataclasses.replace(splits, test=given.train, query=None, gallery=None)


def evaluation_splits(splits):
    """(queries, references or None): In-Shop's query vs gallery, else leave-one-out on test."""
    if splits.query is not None and splits.gallery is not None:
        return splits.query, splits.gallery
    return splits.test, None


def augmentation(shift=0.0, rotation=0.0, scale=0.0, image_size=None, seed=0):
    """The jitter of `keras_dml.data.AffineJitter` as Keras layers (a `keras.Sequential`
    to put in a model of your own), or None when all are 0.

    shift: translation up to this many pixels (of `image_size`); rotation: up to this
    many degrees; scale: zoom up to this fraction. Empty space is filled with 0. The
    layers draw from a seed state that advances call by call (in a tf.data parallel map
    not reproducibly); `keras-dml train` jitters its batches with `AffineJitter`, whose
    draws depend on the seed and the batch's step alone.
    """
    if not (shift or rotation or scale):
        return None
    layers = []
    if rotation:
        layers.append(keras.layers.RandomRotation(rotation / 360.0, fill_mode="constant",
                                                  seed=seed))
    if scale:
        layers.append(keras.layers.RandomZoom((-scale, scale), fill_mode="constant", seed=seed))
    if shift:
        if not image_size:
            raise ValueError("augmentation: a shift in pixels needs the image size.")
        layers.append(keras.layers.RandomTranslation(shift / image_size, shift / image_size,
                                                     fill_mode="constant", seed=seed))
    return keras.Sequential(layers, name="augmentation")


def input_spec(split, image_size, backbone="cnn3", crop="random"):
    """(input shape, Preprocessing or None) for a split held in memory or in files.

    Image files are resized to 256/224 x the image size (the papers' 256 for 224)
    and cropped; a Keras Applications or KerasHub `backbone` gets pixels in [0, 255]
    (its own preprocessing runs inside the model), the others [0, 1]."""
    if split.images is not None:
        shape = np.asarray(split.images).shape[1:]
        if len(shape) == 2:
            shape += (1,)
        if image_size:
            shape = (image_size, image_size, shape[-1])
        return shape, None
    preprocessing = default_preprocessing(
        image_size or FILE_IMAGE_SIZE, crop=crop,
        normalization="none" if backbones.takes_raw_pixels(backbone) else "unit")
    return (preprocessing.image_size, preprocessing.image_size, preprocessing.channels), \
        preprocessing


def augmented(transform, config, input_shape=None):
    """The training batches' map: `transform`, then the configured `AffineJitter`
    (`augment_shift`, `augment_rotation`, `augment_scale`), as `map_fn(x, y, step)`.

    The same map serves every stream `training_batches` makes: in tf.data (image files
    on any backend, in-memory arrays on TensorFlow) and on the NumPy batches of
    in-memory arrays off TensorFlow. The jitter of batch `step` depends on the seed
    and `step` alone, so a run is reproducible and a resumed run draws what an
    uninterrupted one did. `input_shape` is not needed (the jitter reads each batch's
    size); it is accepted for existing callers.
    """
    jitter = AffineJitter(config.augment_shift, config.augment_rotation,
                          config.augment_scale, seed=config.seed)
    if not jitter.active:
        return transform

    def map_fn(x, y, step):
        if transform is not None:
            x, y = transform(x, y)
        return jitter(x, step), y

    return map_fn


def strategy_for(name):
    """`distribute.make_strategy(name)` on TensorFlow; off it None (one device)."""
    if backend.is_tensorflow():
        return distribute.make_strategy(name)
    if name != "auto":
        raise ValueError(f"strategy={name!r} is tf.distribute's: it needs the TensorFlow "
                         f"backend (Keras runs on {backend.name()} here).")
    return None


def training_batches(strategy, split, config, preprocessing, map_fn):
    """The C x k training stream: tf.data on TensorFlow (`distribute.training_batches`);
    off it NumPy batches of in-memory images (`data.ClassBalancedPyDataset`), or
    tf.data for image files (TensorFlow's decoders, where TensorFlow is installed)."""
    options = {"skip_bad_images": True} if config.skip_bad_images else {}
    if split.images is None:
        options["decoded_cache_mb"] = config.decoded_cache_mb
    if strategy is not None:
        return distribute.training_batches(
            strategy, split, config.classes_per_batch, config.samples_per_class,
            seed=config.seed, preprocessing=preprocessing, map_fn=map_fn, **options)
    if split.images is not None:
        return data.ClassBalancedPyDataset(split.images, split.labels, config.classes_per_batch,
                                           config.samples_per_class, seed=config.seed,
                                           map_fn=map_fn)
    backend.require_tensorflow("training on image files (TensorFlow's decoders)")
    return data.class_balanced_batches(
        split, config.classes_per_batch, config.samples_per_class, seed=config.seed,
        preprocessing=preprocessing, map_fn=map_fn, num_replicas=1, **options)


def readable(split):
    """`split` without its image files that cannot be read or decoded, each named on
    stderr (`data.verify_images`: they are listed in its `skipped`)."""
    if split is None or split.paths is None:
        return split
    with warnings.catch_warnings():  # its one-line count: each file is named below
        warnings.simplefilter("ignore", UserWarning)
        readable = data.verify_images(split)
    for path, reason in readable.skipped[len(split.skipped):]:
        print(f"keras_dml.data: {skipped_sentence(path, reason)} (a test image)",
              file=sys.stderr, flush=True)
    return readable


def skipped_images(mark=None):
    """Without `mark`: a mark (the `BadImageGuard`s made so far). With one: the paths
    of the image files left out by `skip_bad_images` streams made since (none without
    TensorFlow)."""
    if not backend.tensorflow_installed():
        return 0 if mark is None else []
    from keras_dml.data import bad_images

    return bad_images.guards_made() if mark is None else bad_images.skipped_files(mark)
