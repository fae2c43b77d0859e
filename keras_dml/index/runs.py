"""A `keras-dml train` run as the source of an index: its embedder, data and image inputs.

A run directory holds `model.keras` and `summary.json` (the training
configuration and export settings). Image files are prepared for its embedder
by `preprocessing(run)`: for runs on image-file datasets the evaluation
transform the model (or the run's summary) records; for runs on in-memory
datasets (digits, Omniglot) a resize to the model input and a scale to [0, 1].
"""

import dataclasses
import json
import os

import numpy as np

from keras_dml import backend

tf = backend.require_tensorflow("keras_dml.index.runs (reading image files)")

SPLITS = ("test", "train", "query", "gallery")


ARRAY_DATASETS = ("digits", "omniglot")  # held in memory: their runs take float images


@dataclasses.dataclass
class Run:
    """A loaded run: `run_dir`, `embedder` (Keras model), `config` (dict),
    `input_shape` (H, W, C) and `export` (the summary's export settings:
    `input_format`, `preprocessing`; empty when not recorded)."""

    run_dir: str
    embedder: object
    config: dict
    input_shape: tuple
    export: dict = dataclasses.field(default_factory=dict)

    @property
    def dataset(self):
        return self.config.get("dataset")

    @property
    def in_memory(self):
        """Whether the run trained on images held as arrays (digits, Omniglot), not files."""
        if self.export.get("input_format"):
            return self.export["input_format"] == "images"
        return self.dataset in ARRAY_DATASETS


def load_run(run_dir):
    """Loads `run_dir/model.keras` (its embedder) and `run_dir/summary.json`; `run_dir`
    may also be a `.keras` file (with the `summary.json` of its folder, if any).

    Raises:
        FileNotFoundError: Not a run directory.
    """
    from keras_dml.export.load import load_keras_model

    run_dir = os.fspath(run_dir)
    model_path = os.path.join(run_dir, "model.keras")
    if run_dir.endswith(".keras") and os.path.isfile(run_dir):  # a model file: its folder
        model_path, run_dir = run_dir, os.path.dirname(os.path.abspath(run_dir))
    if not os.path.isfile(model_path):
        raise FileNotFoundError(f"{model_path} does not exist: {run_dir!r} is not a keras-dml "
                                "run directory (keras-dml train writes runs/<run>/model.keras).")
    summary = {}
    summary_path = os.path.join(run_dir, "summary.json")
    if os.path.isfile(summary_path):
        with open(summary_path) as f:
            summary = json.load(f)
    model = load_keras_model(model_path)
    embedder = model.embedder() if hasattr(model, "embedder") else model
    shape = tuple(int(d) for d in embedder.inputs[0].shape[1:])
    return Run(run_dir, embedder, summary.get("config", {}), shape, summary.get("export") or {})


def split_batches(run, dataset=None, split="test", data_dir=None, batch_size=256):
    """`(batches, class_names)`: `(x, y)` batches of a dataset split, prepared for
    the run's embedder, and the split's class name per label.

    Args:
        run: A `Run`.
        dataset: Dataset name. Defaults to None: the run's training dataset.
        split: `"test"` (default: the held-out classes), `"train"`, `"query"`
            or `"gallery"` (In-Shop).
        data_dir: Local dataset folder. Defaults to the run's.
        batch_size: Defaults to 256.
    """
    return batches_of(run, load_split(run, dataset, split, data_dir), batch_size)


def batches_of(run, chosen, batch_size=256):
    """`(batches, class_names)` of a loaded split (`load_split`), as `split_batches`."""
    from keras_dml import data

    names = [str(name) for name in chosen.class_names]
    if chosen.images is not None:
        return data.evaluation_batches(chosen, batch_size=batch_size, transform=_array_transform(
            chosen, run.input_shape)), names
    return data.evaluation_batches(chosen, preprocessing(run), batch_size=batch_size), names


def load_split(run, dataset=None, split="test", data_dir=None):
    """The `LabeledImages` split of `split_batches` (same arguments), unprepared."""
    from keras_dml import datasets

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
    return chosen


def preprocessing(run):
    """The run's `Preprocessing` for image files.

    A run on image files: the one its model records, else the one its summary
    records, else the one `keras-dml train` builds for the input size (with a
    warning, see `model_preprocessing`). A run on in-memory images: resize to the
    input size and scale to [0, 1], as training saw its arrays.
    """
    from keras_dml.data import Preprocessing
    from keras_dml.data.stream_preprocessing import model_preprocessing, recorded_preprocessing

    height, _, channels = run.input_shape
    if run.in_memory:
        return Preprocessing(image_size=height, resize_size=height, channels=channels)
    if recorded_preprocessing(run.embedder) is None and run.export.get("preprocessing"):
        return Preprocessing.from_dict(run.export["preprocessing"])
    return model_preprocessing(run.embedder)


def run_provenance(run):
    """The `Index.provenance` of embeddings made by `run`'s embedder from image files:
    its `model_fingerprint`, its `preprocessing` and the run directory."""
    from keras_dml.index.provenance import model_fingerprint

    return {"model_fingerprint": model_fingerprint(run.embedder),
            "preprocessing": preprocessing(run).to_dict(),
            "run": os.path.abspath(run.run_dir)}


def _array_transform(split, input_shape):
    from keras_dml.training import array_transform

    return array_transform(split, input_shape)


def readable_images(run, paths):
    """`(images, kept, problems)`: the files that decode, prepared as model input
    `(n, H, W, C)` (None when none does), their paths, and one line per file that
    does not ("PATH: reason"), so one bad file costs only itself."""
    images, kept, problems = [], [], []
    for path in paths:
        image, problem = _image_file(run, path)
        if problem is None:
            images.append(image)
            kept.append(path)
        else:
            problems.append(problem)
    return (np.stack(images) if images else None), kept, problems


def _image_file(run, path):
    """`(prepared image, None)`, or `(None, one-line problem naming the file)`."""
    from keras_dml.data import decode_image

    if not os.path.isfile(path):
        return None, f"No image file at {path!r}."
    prepare = preprocessing(run)
    try:
        image = decode_image(tf.io.read_file(path), channels=prepare.channels)
    except tf.errors.OpError as error:
        return None, f"{path} is not a decodable image: {op_message(error)}"
    return prepare.eval(image).numpy(), None


def op_message(error):
    """A TensorFlow op error's message without TensorFlow's `{{function_node ...}}`
    prefix and `[Op:...]` suffix: "Unknown image file format. One of JPEG, PNG, GIF,
    BMP required."."""
    import re

    message = re.sub(r"\{\{[^}]*\}\}\s*", "", error.message)
    return re.sub(r"\s*\[Op:.*$", "", message, flags=re.S).strip()


def embedded_chunks(run, paths, chunk_size, batch_size=64):
    """Yields `(embeddings, kept paths, problems)` for consecutive chunks of `paths`,
    embedded by the run's embedder with its preprocessing.

    One `tf.data` pipeline and one compiled forward pass serve every chunk (a new
    pipeline per chunk grows the process' memory with each), so memory follows
    `chunk_size`, not `len(paths)`. A file that cannot be read or decoded costs
    only itself: the chunk holding it is embedded file by file, the file named in
    `problems` ("PATH is not a decodable image: ..."), and the pipeline restarts
    after it.
    """
    from keras_dml.data import evaluation_batches
    from keras_dml.data.bad_images import BadImageError, clear_error
    from keras_dml.evaluation.embedding import inference_function

    import keras

    prepare = preprocessing(run)
    forward = inference_function(run.embedder)

    def numpy(out):
        return keras.ops.convert_to_numpy(out).astype(np.float32, copy=False)

    def embed(images):
        return np.concatenate([numpy(forward(images[i:i + batch_size]))
                               for i in range(0, len(images), batch_size)])

    paths = [str(p) for p in paths]
    start = 0
    while start < len(paths):
        rest = paths[start:]
        batches = evaluation_batches((rest, np.zeros(len(rest), np.int32)), prepare,
                                     batch_size=batch_size)
        done = []
        try:
            for x, _ in batches:
                done.append(numpy(forward(x)))
                rows = sum(len(e) for e in done)
                if rows >= chunk_size:
                    yield np.concatenate(done), paths[start:start + rows], []
                    start, done = start + rows, []
            if done:
                rows = sum(len(e) for e in done)
                yield np.concatenate(done), paths[start:start + rows], []
                start += rows
        except (tf.errors.OpError, BadImageError) as error:  # a bad file in the next batch
            clear = error if isinstance(error, BadImageError) else clear_error(error)
            if not isinstance(clear, BadImageError):
                raise
            end = start + sum(len(e) for e in done) + batch_size
            images, kept, problems = readable_images(run, paths[start:end])
            yield (np.zeros((0, 0), np.float32) if images is None else embed(images)), kept, \
                problems
            start = end
