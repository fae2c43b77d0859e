"""A `keras-dml train` run as the source of an index: its embedder, data and image inputs.

A run directory holds `model.keras` and `summary.json` (the training
configuration). Its images are prepared as training prepared them: in-memory
datasets (digits, Omniglot) as float32 in [0, 1] resized to the model input,
image-file datasets with `Preprocessing(image_size=...)` evaluation transforms.
"""

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

SPLITS = ("test", "train", "query", "gallery")


@dataclasses.dataclass
class Run:
    """A loaded run: `run_dir`, `embedder` (Keras model), `config` (dict),
    `input_shape` (H, W, C)."""

    run_dir: str
    embedder: object
    config: dict
    input_shape: tuple

    @property
    def dataset(self):
        return self.config.get("dataset")


def load_run(run_dir):
    """Loads `run_dir/model.keras` (its embedder) and `run_dir/summary.json`.

    Raises:
        FileNotFoundError: Not a run directory.
    """
    from keras_dml.export.load import load_keras_model

    run_dir = os.fspath(run_dir)
    model_path = os.path.join(run_dir, "model.keras")
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"{model_path} does not exist: {run_dir!r} is not a keras-dml "
                                "run directory (keras-dml train writes runs/<run>/model.keras).")
    config = {}
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path) as f:
            config = json.load(f).get("config", {})
    model = load_keras_model(model_path)
    embedder = model.embedder() if hasattr(model, "embedder") else model
    shape = tuple(int(d) for d in embedder.inputs[0].shape[1:])
    return Run(run_dir, embedder, config, shape)


def split_batches(run, dataset=None, split="test", data_dir=None, batch_size=256):
    """`(batches, in_memory, class_names)`: `(x, y)` batches of a dataset split,
    prepared for the run's embedder, whether the dataset is held as arrays (not
    files), and the split's class name per label.

    Args:
        run: A `Run`.
        dataset: Dataset name. Defaults to None: the run's training dataset.
        split: `"test"` (default: the held-out classes), `"train"`, `"query"`
            or `"gallery"` (In-Shop).
        data_dir: Local dataset folder. Defaults to the run's.
        batch_size: Defaults to 256.
    """
    from keras_dml import data, datasets

    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}.")
    name = dataset or run.dataset
    if not name:
        raise ValueError(f"{run.run_dir} records no dataset: pass --dataset.")
    from keras_dml.training_config import own_files_options

    test_classes = run.config.get("test_classes") if name == run.dataset else None
    splits = datasets.load(name, data_dir=data_dir or run.config.get("data_dir"),
                           **own_files_options(name, test_classes))
    chosen = getattr(splits, split, None)
    if chosen is None:
        raise ValueError(f"Dataset {name!r} has no {split!r} split.")
    names = [str(name) for name in chosen.class_names]
    if chosen.images is not None:
        return data.evaluation_batches(chosen, batch_size=batch_size, transform=_array_transform(
            chosen, run.input_shape)), True, names
    return data.evaluation_batches(chosen, preprocessing(run), batch_size=batch_size), False, names


def preprocessing(run):
    """The run's `Preprocessing` for image files (as `keras-dml train` builds it)."""
    from keras_dml.data import Preprocessing

    return Preprocessing(image_size=run.input_shape[0], channels=run.input_shape[-1])


def _array_transform(split, input_shape):
    from keras_dml.training import array_transform

    return array_transform(split, input_shape)


def image_files(run, paths, in_memory=True):
    """Image files decoded and prepared as model input `(n, H, W, C)`.

    For runs on in-memory datasets (`in_memory=True`): decoded, scaled to
    [0, 1] and resized to the model input, as training saw its arrays; else
    the evaluation `Preprocessing`.
    """
    from keras_dml.data import decode_image

    height, width, channels = run.input_shape
    images = []
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"No image file at {path!r}.")
        try:
            image = decode_image(tf.io.read_file(path), channels=channels)
        except tf.errors.InvalidArgumentError as error:
            raise ValueError(f"{path} is not a decodable image: {error.message}") from None
        if in_memory:
            image = tf.image.resize(tf.cast(image, tf.float32) / 255.0, (height, width),
                                    antialias=True)
        else:
            image = preprocessing(run).eval(image)
        images.append(image.numpy())
    return np.stack(images)
