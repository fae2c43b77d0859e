"""`Stream`: a keras_dml tf.data pipeline as one object, with what it carries.

`class_balanced_batches`, `evaluation_batches` and the other keras_dml pipelines
return a `Stream`: a `tf.data.Dataset` (usable wherever one is: `model.fit`,
iteration, `element_spec`, `tf.distribute`) that also carries the `Preprocessing`
it applies, its resume `StreamPosition` and its `BadImageGuard`, as a Keras
`DataAdapter` carries what it classified. `DMLModel.fit` saves the preprocessing
with the model, `TrainingBackup(stream=...)` resumes the position.

A transformation keeps what still holds: `.prefetch`, `.map` (one batch out per
batch in; taken as augmentation, as `map_fn` is), `.repeat` and `.with_options`
keep all three; `.take(n)` keeps the preprocessing and the guard but not the
position (a finite stream restarts at each epoch of `fit`, so its batches are not
the steps a backup counts). Any other transformation returns a plain
`tf.data.Dataset`: `stream_of` still finds the stream it came from, and
`lost_sentence` says in one line what it no longer carries and how to keep it.
"""

import re

from keras_dml import backend

__all__ = ["CARRIED", "Stream", "lost_sentence", "stream_of"]

tf = backend.require_tensorflow("keras_dml.data's streams (tf.data)")

#: What a stream carries, in the words of the one-line messages.
CARRIED = {"preprocessing": "its preprocessing (saved with the model by DMLModel.fit)",
           "position": "its resume position (TrainingBackup(stream=...))",
           "guard": "its bad-image guard"}

_ANCESTORS_SEARCHED = 64  # datasets walked back from a derived one to find its stream


class Stream(tf.data.Dataset):
    """A keras_dml `tf.data.Dataset` and what it carries.

    Attributes:
        dataset: The `tf.data.Dataset` it delivers (its elements, options, cardinality).
        preprocessing: The `keras_dml.data.Preprocessing` it applies, or None.
        position: Its `keras_dml.data.StreamPosition` (step-indexed, resumable), or None.
        guard: The `keras_dml.data.bad_images.BadImageGuard` of its image files, or None.
        lost: `{what: (call, way to keep it)}` for what an earlier transformation
            dropped (`what` a key of `CARRIED`, the call e.g. ".take(5)"), for the
            one-line message.
    """

    def __init__(self, dataset, preprocessing=None, position=None, guard=None, lost=None):
        if isinstance(dataset, Stream):
            dataset = dataset.dataset
        self.dataset = dataset  # before the base class reads `_inputs`
        self.preprocessing = preprocessing
        self.position = position
        self.guard = guard
        self.lost = dict(lost or {})
        super().__init__(dataset._variant_tensor)

    def _inputs(self):
        return [self.dataset]

    @property
    def element_spec(self):
        return self.dataset.element_spec

    def carrying(self, **changes):
        """This stream with some of what it carries replaced (keyword: attribute)."""
        carried = {"preprocessing": self.preprocessing, "position": self.position,
                   "guard": self.guard, "lost": self.lost}
        unknown = sorted(set(changes) - set(carried))
        if unknown:
            raise TypeError(f"a Stream carries {sorted(carried)}, not {unknown}")
        return Stream(self.dataset, **{**carried, **changes})

    def _derived(self, dataset, dropped=(), how=None):
        """`dataset` (made from this stream) as a stream keeping all but `dropped`;
        `how` is `(the call, the way to keep them)` for the one-line message."""
        return Stream(dataset, **{name: getattr(self, name) for name in CARRIED
                                  if name not in dropped},
                      lost={**self.lost, **{name: how for name in dropped
                                            if getattr(self, name) is not None}})

    def prefetch(self, *args, **kwargs):
        """`tf.data.Dataset.prefetch`, as a stream keeping all it carries."""
        return self._derived(super().prefetch(*args, **kwargs))

    def map(self, *args, **kwargs):
        """`tf.data.Dataset.map`, as a stream keeping all it carries (one batch out per
        batch in, so the position holds; the preprocessing stays the one the model
        records: a map is augmentation, as `map_fn` is)."""
        return self._derived(super().map(*args, **kwargs))

    def repeat(self, *args, **kwargs):
        """`tf.data.Dataset.repeat`, as a stream keeping all it carries (an infinite
        stream repeats unchanged; a finite one carries no position)."""
        return self._derived(super().repeat(*args, **kwargs))

    def with_options(self, *args, **kwargs):
        """`tf.data.Dataset.with_options`, as a stream keeping all it carries."""
        return self._derived(super().with_options(*args, **kwargs))

    def take(self, count, name=None):
        """`tf.data.Dataset.take`, as a stream keeping its preprocessing and guard but not
        its position: `fit` restarts a finite dataset at each epoch, so its batches
        are no longer the steps a backup counts."""
        return self._derived(
            super().take(count, name=name), dropped=("position",),
            how=(f".take({count})", f"fit the stream itself with steps_per_epoch={count}"))

    def skipped_files(self):
        """The files its guard left out (`skip_bad_images=True`), in the order met."""
        if self.guard is None:
            return []
        return list(dict.fromkeys(self.guard.name(i) for i in self.guard.bad))


def stream_of(data):
    """`(stream, how)`: the `Stream` `data` is (`how` None) or was made from by a
    transformation a stream does not forward (`how` that call, e.g. ".shuffle()");
    `(None, None)` for anything else."""
    if isinstance(data, Stream):
        return data, None
    if not isinstance(data, tf.data.Dataset):
        return None, None
    seen, pending = 0, list(_inputs_of(data))
    while pending and seen < _ANCESTORS_SEARCHED:
        dataset = pending.pop(0)
        seen += 1
        if isinstance(dataset, Stream):
            return dataset, _call(type(data).__name__)
        pending.extend(_inputs_of(dataset))
    return None, None


def _call(class_name):
    """The `tf.data.Dataset` method a dataset class comes from: "_ShuffleDataset" ->
    ".shuffle()"."""
    words = re.findall(r"[A-Z][a-z0-9]*", re.sub(r"Dataset(V\d)?$", "", class_name))
    return f".{'_'.join(words).lower()}()" if words else class_name


def _inputs_of(dataset):
    try:
        return list(dataset._inputs())
    except (AttributeError, NotImplementedError, TypeError):
        return []


def lost_sentence(data, what):
    """One line saying that `data` no longer carries `what` (a key of `CARRIED`), how
    it was lost and how to keep it; None when it still does, or when `data` never
    came from a stream carrying it."""
    stream, how = stream_of(data)
    if stream is None:
        return None
    if how is None:
        if what not in stream.lost:
            return None
        how, keep = stream.lost[what]
    else:
        if getattr(stream, what) is None:
            return None
        keep = ("apply only .prefetch, .map, .take, .repeat or .with_options to the stream "
                "(they keep it)")
    return (f"keras_dml: this dataset was made from a keras_dml stream by {how}, which "
            f"drops {CARRIED[what]}; to keep it, {keep}.")
