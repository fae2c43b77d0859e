"""A `keras-dml train` run as the source of an index: its embedder, data and image inputs.

A run directory holds `model.keras` and `summary.json` (the training
configuration and export settings). A pretrained backbone without training,
"hub:PRESET" or a Keras Applications family, is a run too (`backbone_run`): its
L2-normalised pooled features are the embedding, the zero-shot baseline. Image
files are prepared for its embedder by `preprocessing(run)`: for runs on
image-file datasets the evaluation transform the model (or the run's summary)
records; for runs on in-memory datasets (digits, Omniglot) a resize to the model
input and a scale to [0, 1].
"""

import dataclasses
import json
import os

__all__ = ["ARRAY_DATASETS", "SPLITS", "Run", "backbone_run", "batches_of", "embed_chunks",
           "embed_files",
           "embed_split", "embedded_chunks", "load_run", "load_split", "preprocessing",
           "run_provenance", "split_batches"]

SPLITS = ("test", "train", "query", "gallery")


ARRAY_DATASETS = ("digits", "omniglot")  # held in memory: their runs take float images


@dataclasses.dataclass
class Run:
    """A loaded run: `run_dir` (None for a backbone without training), `embedder`
    (Keras model), `config` (dict), `input_shape` (H, W, C) and `export` (the
    summary's export settings: `input_format`, `preprocessing`; empty when not
    recorded)."""

    run_dir: str
    embedder: object
    config: dict
    input_shape: tuple
    export: dict = dataclasses.field(default_factory=dict)

    @property
    def source(self):
        """What made the embedder: the run folder's absolute path, or for a backbone
        without training its name (`load_run` loads either)."""
        return self.config["backbone"] if self.run_dir is None else os.path.abspath(
            self.run_dir)

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
    may also be a `.keras` file (with the `summary.json` of its folder, if any), or
    the name of a pretrained backbone (`backbone_run`): "hub:PRESET", or a Keras
    Applications family where no file or folder has that name.

    Raises:
        FileNotFoundError: Not a run directory.
    """
    from keras_dml.backbone_families import pretrained_name
    from keras_dml.export.load import load_keras_model

    run_dir = os.fspath(run_dir)
    if pretrained_name(run_dir) and not os.path.exists(run_dir):
        return backbone_run(run_dir)
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


def backbone_run(name):
    """A `Run` of a pretrained backbone without training, "hub:PRESET" or a Keras
    Applications family: its zero-shot embedder (`keras_dml.backbones.zero_shot_embedder`:
    the pretrained weights at the backbone's own image size, pooled, L2-normalised),
    fed image files as `keras-dml train` evaluates them (resized to 256/224 x the size,
    centre-cropped, raw pixels).

    The name is recorded (`config["backbone"]`) so that it loads the same embedder
    from anywhere: a local preset folder by its absolute path, an Applications family
    as `keras_dml.backbones.FAMILIES` spells it.

    Raises:
        ValueError: `name` is not a pretrained backbone.
    """
    from keras_dml.backbone_families import HUB_PREFIX, is_hub, pretrained_name
    from keras_dml.backbones import zero_shot_embedder
    from keras_dml.data.preprocessing import default_preprocessing
    from keras_dml.hub_backbones import preset_of

    found = pretrained_name(name)
    if found is None:
        raise ValueError(f"{name!r} is not a pretrained backbone: give hub:PRESET or a Keras "
                         "Applications name such as ResNet50.")
    name = found
    preset = os.path.expanduser(preset_of(name)) if is_hub(name) else None
    if preset is not None and os.path.isdir(preset):
        name = HUB_PREFIX + os.path.abspath(preset)
    model = zero_shot_embedder(name)
    shape = tuple(int(d) for d in model.inputs[0].shape[1:])
    prepared = default_preprocessing(shape[0], normalization="none", crop="random")
    return Run(None, model, {"backbone": name}, shape,
               {"input_format": "image_bytes", "preprocessing": prepared.to_dict()})


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
    from keras_dml.data.transforms import array_transform

    names = [str(name) for name in chosen.class_names]
    if chosen.images is not None:
        return data.evaluation_batches(chosen, batch_size=batch_size, transform=array_transform(
            chosen, run.input_shape)), names
    return data.evaluation_batches(chosen, preprocessing(run), batch_size=batch_size), names


def load_split(run, dataset=None, split="test", data_dir=None):
    """The `LabeledImages` split of `split_batches` (same arguments), unprepared."""
    from keras_dml import datasets

    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}.")
    name = dataset or run.dataset
    if not name:
        raise ValueError(f"{run.source} records no dataset: pass --dataset.")
    from keras_dml.training.config import own_files_options

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
    its `model_fingerprint`, its `preprocessing` and the run directory (`Run.source`)."""
    from keras_dml.index.provenance import model_fingerprint

    return {"model_fingerprint": model_fingerprint(run.embedder),
            "preprocessing": preprocessing(run).to_dict(), "run": run.source}


def embed_split(run, split, batch_size=256, skip_bad_images=False, progress=True):
    """The `keras_dml.inference.Embedded` of a loaded split (`load_split`) by the run's
    embedder: image files prepared by `preprocessing(run)`, in-memory images by
    `keras_dml.data.transforms.array_transform`; labels its ids `0..C-1`."""
    from keras_dml.data import evaluation_batches
    from keras_dml.data.inputs import DATASET, Data, as_data
    from keras_dml.data.transforms import array_transform
    from keras_dml.inference.entry import embed_data

    if split.images is not None:
        data = Data(DATASET, evaluation_batches(
            split, batch_size=batch_size, transform=array_transform(split, run.input_shape)))
    else:
        data = as_data(split)
    return embed_data(run.embedder, data, batch_size, preprocessing=preprocessing(run),
                      skip_bad_images=skip_bad_images, progress=progress)


def embed_files(run, paths, labels=None, batch_size=64, skip_bad_images=False,
                progress=True):
    """The `keras_dml.inference.Embedded` of image files by the run's embedder and
    preprocessing; `labels` (one per file, or None) are kept with them."""
    from keras_dml.inference import embed

    files = [str(p) for p in paths] if labels is None else ([str(p) for p in paths], labels)
    return embed(run.embedder, files, batch_size, preprocessing=preprocessing(run),
                 skip_bad_images=skip_bad_images, progress=progress)


def embed_chunks(run, paths, chunk_size, batch_size=64, skip_bad_images=False,
                 progress=None):
    """`keras_dml.inference.embed_chunks` of image files by the run's embedder and
    preprocessing: an iterator of `Embedded` chunks (`paths` kept, `skipped` left out).

    One pipeline and one compiled forward pass serve every chunk, so memory follows
    `chunk_size`, not `len(paths)`. A file that cannot be read or decoded stops the
    iteration with an error naming it, unless `skip_bad_images`.
    """
    from keras_dml import inference

    return inference.embed_chunks(run.embedder, [str(p) for p in paths], chunk_size,
                                  batch_size, preprocessing=preprocessing(run),
                                  skip_bad_images=skip_bad_images, progress=progress)


def embedded_chunks(run, paths, chunk_size, batch_size=64):
    """Deprecated: `embed_chunks(run, paths, chunk_size, skip_bad_images=True)`; yields
    `(embeddings, kept paths, problems)` with one "PATH (reason)" per skipped file."""
    import warnings

    from keras_dml.hyperparameters import deprecation

    warnings.warn(deprecation("keras_dml.index.runs.embedded_chunks", "use embed_chunks"),
                  DeprecationWarning, stacklevel=2)
    for chunk in embed_chunks(run, paths, chunk_size, batch_size, skip_bad_images=True):
        yield chunk.embeddings, chunk.paths, [f"{path} ({why})" for path, why in chunk.skipped]
