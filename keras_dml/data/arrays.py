"""`ClassBalancedPyDataset`: the C x k stream of in-memory arrays as NumPy batches."""

import inspect

import keras
import numpy as np

from keras_dml.data.inputs import ARRAYS, as_data
from keras_dml.data.labels import label_ids
from keras_dml.data.sampler import ClassBalancedSampler
from keras_dml.hyperparameters import integer_at_least

__all__ = ["ArrayStreamPosition", "ClassBalancedPyDataset"]


class ArrayStreamPosition:
    """Where a `ClassBalancedPyDataset` starts: the stream's index of its batch 0.

    The NumPy twin of `keras_dml.data.StreamPosition` (same attributes), which
    `keras_dml.callbacks.TrainingBackup` saves and sets on resume.

    Attributes:
        start: The stream's index of batch 0 (settable before iteration begins).
        seed: The stream's seed (`None`: not reproducible).
        batch_size: C * k, recorded to match a backup with its stream.
        replayable: True: the batches depend on the seed and the step only.
    """

    replayable = True

    def __init__(self, start, seed, batch_size):
        self.start = integer_at_least("start_step", start, 0)
        self.seed = seed
        self.batch_size = batch_size


class ClassBalancedPyDataset(keras.utils.PyDataset):
    """Infinite `(x, y)` NumPy batches of C classes x k samples, on any Keras backend.

    The batches of `keras_dml.data.class_balanced_batches((x, y), ...)` for the
    same `seed` (before its `map_fn` and preprocessing), drawn by the same
    `ClassBalancedSampler` in NumPy (`numpy_batch`), so no TensorFlow is needed.
    Batch `i` is the stream's batch `start_step + i`. The dataset is infinite
    (`num_batches` is None): give `fit` its `steps_per_epoch`, and Keras asks for
    batches 0, 1, 2, ... across the epochs, as the tf.data stream delivers them.

    Args:
        x: In-memory inputs, `(N, ...)` (images of the TF pipeline's file sources
            need TensorFlow's decoders: use `class_balanced_batches` for those).
        y: `(N,)` integer class ids or class names (strings, which become ids in
            sorted order; `class_names` holds them).
        classes_per_batch: C.
        samples_per_class: k.
        small_classes: `"replace"` or `"drop"` for classes with fewer than k
            samples (see `ClassBalancedSampler`). Defaults to `"replace"`.
        seed: The index stream's seed. Defaults to `None` (not reproducible).
        map_fn: Optional `map_fn(x, y) -> (x, y)` applied to each NumPy batch
            (e.g. scaling images to float32); one with a third parameter is
            called `map_fn(x, y, step)` with the batch's stream index, to seed
            its randomness by step (so a resumed run replays it). Defaults to None.
        start_step: The stream's index of batch 0 (resuming a run; `position`
            holds it). Defaults to 0.
        **kwargs: `keras.utils.PyDataset`'s `workers`, `use_multiprocessing` and
            `max_queue_size`.

    Examples:

    >>> x = np.random.rand(100, 8, 8, 1).astype("float32")
    >>> y = np.repeat(np.arange(10), 10)
    >>> batches = ClassBalancedPyDataset(x, y, 4, 3, seed=0)
    >>> xb, yb = batches[0]
    >>> xb.shape, yb.dtype
    ((12, 8, 8, 1), dtype('int32'))
    """

    def __init__(self, x, y, classes_per_batch, samples_per_class, *,
                 small_classes="replace", seed=None, map_fn=None, start_step=0, **kwargs):
        super().__init__(**kwargs)
        data = as_data((x, y), (ARRAYS,), "(x, y)", hint=(
            "Image file paths are read by TensorFlow's decoders: use "
            "keras_dml.data.class_balanced_batches."))
        self.x = np.asarray(data.x)
        self.labels, self.class_names = label_ids(data.y, len(self.x))
        self.labels = self.labels.astype(np.int32)
        self.sampler = ClassBalancedSampler(self.labels, classes_per_batch, samples_per_class,
                                            small_classes=small_classes, seed=seed)
        self.seed = seed
        self.map_fn = map_fn
        self._map_takes_step = map_fn is not None and _positional_parameters(map_fn) >= 3
        self.position = ArrayStreamPosition(start_step, seed, self.sampler.batch_size)

    @property
    def start_step(self):
        """The stream's index of batch 0 (`position.start`)."""
        return self.position.start

    @start_step.setter
    def start_step(self, value):
        self.position.start = integer_at_least("start_step", value, 0)

    @property
    def num_batches(self):
        """None: the stream is infinite."""
        return None

    @property
    def batch_size(self):
        """C * k."""
        return self.sampler.batch_size

    def __getitem__(self, index):
        step = self.position.start + int(index)
        indices = self.sampler.numpy_batch(step)
        x, y = self.x[indices], self.labels[indices]
        if self._map_takes_step:
            x, y = self.map_fn(x, y, step)
        elif self.map_fn is not None:
            x, y = self.map_fn(x, y)
        return x, y


def _positional_parameters(function):
    """How many positional arguments `function` takes (a large number for `*args`)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return 2
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return 2  # cannot tell: called as (x, y)
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)
