"""One way in: a user's data, normalised once into a `Data` (NumPy only, no TensorFlow).

Every public function that takes data (the tf.data pipelines, `verify_images`,
`keras_dml.inference.embed`, `keras_dml.evaluation.embed_dataset`, the callbacks,
`Index.from_model`, ...) calls `as_data` once, at its entry; everything below it
takes the `Data` (or what is built from it: a `keras_dml.data.sources.Source` for
the tf.data pipelines, `keras_dml.inference`'s prepared batches for embedding) and
never looks at the user's value, nor asks `as_data` again.

The forms (`FORMS`; the table in docs/guide/data.md, "Accepted data"):

- `ARRAYS`: `(x, y)` arrays (or tensors): images (or any inputs) and their labels.
- `WEIGHTED`: `(x, y, sample_weight)` arrays (what Keras' `fit` takes).
- `IMAGES`: an array of inputs without labels.
- `FILES`: `(paths, labels)`: image file paths (str, bytes or `os.PathLike`) and labels.
- `PATHS`: a list of image file paths without labels.
- `SPLIT`: a `keras_dml.datasets.LabeledImages` (images in memory or files).
- `DATASET`: a `tf.data.Dataset` (its elements are samples for the tf.data
  pipelines, batches for embedding).
- `PYDATASET`: a `keras.utils.PyDataset` of batches.
- `BATCHES`: any other iterable of `(x, y)` batches (a list, a generator).

A folder or CSV file is not data yet: `keras_dml.datasets.from_directory(root)` or
`from_csv(path)` reads it into `LabeledImages` splits.
"""

import dataclasses
import os

import keras

from keras_dml.backend.trainer import is_tf_dataset
from keras_dml.data.labels import is_paths
from keras_dml.datasets.base import DMLSplits, LabeledImages

__all__ = ["BATCH_STREAMS", "Data", "EMBEDDABLE", "FORMS", "LABELLED", "SAMPLES", "as_data",
           "unsupported"]

ARRAYS, WEIGHTED, IMAGES = "arrays", "weighted", "images"
FILES, PATHS, SPLIT = "files", "paths", "split"
DATASET, PYDATASET, BATCHES = "dataset", "pydataset", "batches"

FORMS = {
    ARRAYS: "(x, y) arrays",
    WEIGHTED: "(x, y, sample_weight) arrays",
    IMAGES: "an array of images without labels",
    FILES: "(paths, labels) of image files",
    PATHS: "a list of image file paths",
    SPLIT: "a keras_dml.datasets.LabeledImages split",
    DATASET: "a tf.data.Dataset",
    PYDATASET: "a keras.utils.PyDataset",
    BATCHES: "an iterable of (x, y) batches",
}

# What each family of public functions takes.
SAMPLES = (ARRAYS, FILES, SPLIT, DATASET)  # the tf.data pipelines, evaluation_batches
EMBEDDABLE = tuple(FORMS)  # keras_dml.inference.embed, embed_dataset, Index.from_model
LABELLED = tuple(form for form in FORMS if form not in (IMAGES, PATHS))  # evaluate_retrieval
BATCH_STREAMS = (ARRAYS, WEIGHTED, DATASET, PYDATASET, BATCHES)  # the callbacks' data

GUIDE = "docs/guide/data.md, 'Accepted data'"


@dataclasses.dataclass(frozen=True)
class Data:
    """A user's data in one of the `FORMS`, its parts taken apart once.

    Attributes:
        form: One of `FORMS`.
        x: The inputs (`ARRAYS`, `WEIGHTED`, `IMAGES`, an in-memory `SPLIT`),
            the image paths as a list of str (`FILES`, `PATHS`, a file `SPLIT`),
            or the stream itself (`DATASET`, `PYDATASET`, `BATCHES`).
        y: The labels as given (`SPLIT`: its ids `0..C-1`), or None.
        sample_weight: `WEIGHTED`'s sample weights, else None.
        split: The `LabeledImages` of a `SPLIT`, else None.
    """

    form: str
    x: object
    y: object = None
    sample_weight: object = None
    split: LabeledImages = None

    @property
    def files(self):
        """Whether `x` is image file paths (`FILES`, `PATHS`, a file `SPLIT`)."""
        return self.form in (FILES, PATHS) or (self.form == SPLIT and self.split.paths is not None)

    @property
    def class_names(self):
        """A `SPLIT`'s class name per label id, else None."""
        return None if self.split is None else self.split.class_names

    def with_labels(self, y):
        """This `IMAGES` or `PATHS` data labelled `y`, as `ARRAYS` or `FILES`."""
        if self.form not in (IMAGES, PATHS):
            raise ValueError(f"with_labels labels unlabelled data; this is {FORMS[self.form]}.")
        return dataclasses.replace(self, form=ARRAYS if self.form == IMAGES else FILES, y=y)

    def __repr__(self):
        size = "" if self.form in (DATASET, PYDATASET, BATCHES) else f", {len(self.x)} items"
        return f"Data({self.form}{size})"


def as_data(value, accepted=tuple(FORMS), name="source", hint=""):
    """`value` as a `Data` whose form is one of `accepted`; a `Data` is returned as it is.

    Args:
        value: The user's data, in one of the `FORMS`, or a `Data`.
        accepted: The forms the calling function takes. Defaults to all.
        name: The argument's name in the error. Defaults to "source".
        hint: A sentence the error adds (what to do instead). Defaults to none.

    Raises:
        ValueError: `value` is in no form of `accepted`: the one message naming
            the type received and the accepted forms (`unsupported`).

    Examples:

    >>> as_data((np.zeros((4, 2)), np.arange(4))).form
    'arrays'
    >>> as_data((["a.jpg", "b.jpg"], ["cat", "dog"])).form
    'files'
    """
    data = value if isinstance(value, Data) else _classify(value)
    if data is None or data.form not in accepted:
        raise unsupported(value, accepted, name, hint)
    return data


def unsupported(value, accepted, name="source", hint=""):
    """The ValueError for `value` given as `name` where only the `accepted` forms are
    taken: the type (or form) received and the forms accepted, the same everywhere,
    then `hint` (a sentence) if given."""
    forms = [FORMS[form] for form in accepted]
    listing = forms[0] if len(forms) == 1 else ", ".join(forms[:-1]) + " or " + forms[-1]
    hint = f" {hint}" if hint else ""
    return ValueError(f"{name} must be {listing}; got {_received(value)}.{hint} "
                      f"See {GUIDE}.")


def _received(value):
    """What the error says was received: the form when it has one, else the type."""
    if isinstance(value, Data):
        return FORMS[value.form]
    if isinstance(value, (str, bytes, os.PathLike)):
        return (f"{type(value).__name__} {os.fsdecode(value)!r} (a folder or CSV file: read it "
                "with keras_dml.datasets.from_directory or from_csv first)")
    if isinstance(value, DMLSplits):
        return "DMLSplits (pass one of its splits, such as splits.train)"
    data = _classify(value)
    return type(value).__name__ if data is None else f"{FORMS[data.form]} ({type(value).__name__})"


def _paths(paths):
    return [os.fsdecode(path) for path in paths]


def _parts(value):
    """Whether `value` is `(x, y)` or `(x, y, w)` rather than a list of batches: a tuple or
    list of 2 or 3 whose first item is not a batch (a tuple or dict; in a list, a list)."""
    if not isinstance(value, (tuple, list)) or len(value) not in (2, 3):
        return False
    first = value[0]
    return not isinstance(first, (tuple, dict)) and (
        isinstance(value, tuple) or not isinstance(first, list) or is_paths(first))


def _classify(value):
    """The `Data` of `value`, or None when it is in no form. The only place a form is
    told apart."""
    if isinstance(value, LabeledImages):
        files = value.paths is not None
        return Data(SPLIT, _paths(value.paths) if files else value.images, value.labels,
                    split=value)
    if is_tf_dataset(value, distributed=False):
        return Data(DATASET, value)
    if isinstance(value, keras.utils.PyDataset):
        return Data(PYDATASET, value)
    if isinstance(value, (str, bytes, os.PathLike, dict)):
        return None
    if is_paths(value):
        return Data(PATHS, _paths(value))
    if _parts(value):
        if len(value) == 3:
            return Data(WEIGHTED, value[0], value[1], sample_weight=value[2])
        if is_paths(value[0]):
            return Data(FILES, _paths(value[0]), value[1])
        return Data(ARRAYS, value[0], value[1])
    if hasattr(value, "shape"):
        return Data(IMAGES, value)
    if hasattr(value, "__iter__"):
        return Data(BATCHES, value)
    return None
