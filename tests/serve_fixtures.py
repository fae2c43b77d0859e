"""What the tests of `keras-dml serve` share: a tiny run, a folder of photos and a
Milvus Lite catalogue of them built by `keras-dml index`."""

import json
import pathlib

import keras
import numpy as np

from keras_dml import cli
from keras_dml.data import Preprocessing
from keras_dml.layers import EmbeddingHead
from keras_dml.models import DMLModel

PREPROCESSING = Preprocessing(image_size=16, resize_size=20)
COLOURS = {"cat": (200, 40, 40), "dog": (40, 200, 40), "owl": (40, 40, 200)}


def write_png(path, colour, seed, size=(24, 20)):
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = np.clip(np.asarray(colour) + rng.integers(-30, 30, (*size, 3)), 0, 255)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.astype(np.uint8)).save(path)
    return path


def colour_photos(root):
    """root/<class>/<i>.png: 3 classes x 3 photos."""
    for number, (name, colour) in enumerate(COLOURS.items()):
        for i in range(3):
            write_png(root / name / f"{i}.png", colour, 10 * number + i)
    return root


def make_run(root, seed=0, size=16, preprocessing=PREPROCESSING):
    """A run folder as `keras-dml train` leaves it (untrained: the service is under test)."""
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, 3))
    x = keras.layers.Conv2D(8, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    DMLModel(inputs, EmbeddingHead(6)(x)).save(root / "model.keras")
    (root / "summary.json").write_text(json.dumps({
        "config": {"dataset": "folder"},
        "export": {"input_format": "image_bytes", "preprocessing": preprocessing.to_dict()}}))
    return root


def index(run, photos, uri, collection=None):
    """`keras-dml index RUN --images PHOTOS --uri URI [--collection NAME]`."""
    argv = ["index", str(run), "--images", str(photos), "--uri", str(uri)]
    if collection is not None:
        argv += ["--collection", collection]
    assert cli.main(argv) == 0
