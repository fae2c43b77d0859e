"""Class-balanced index sampling: C classes x k samples per batch, step-indexed.

Batch `t` is a pure function of the seed and `t`: every random choice is a
32-bit hash of (seed, epoch or pass, position) followed by an argsort. The
same arithmetic is written once and runs in TF ops (`batch`: a `tf.data`
pipeline draws it with no Python in the loop, as a Python generator in
`tf.data` slows every later training step: see benchmarks/README.md) or in
NumPy (`numpy_batch`: no TensorFlow needed), which give the same batches. A
resumed run regenerates batch `t` in O(1); the `tf.data` stream draws a whole
epoch at once (`epoch`: the same batches for one sort of the classes instead of
one per batch). Memory is O(number of samples):
one flat array of every class's members, no per-class datasets, so SOP's
11,318 classes cost no more than its 59,551 indices.
"""

import sys
import warnings

import numpy as np

from keras_dml import backend
from keras_dml.hyperparameters import integer_at_least

__all__ = ["ClassBalancedSampler"]


class ClassBalancedSampler:
    """Step-indexed stream of index batches with C distinct classes x k samples.

    Classes: the stream is a sequence of epochs over the usable classes. Each
    epoch is a fresh random permutation cut into `ceil(L / C)` batches, so
    every class appears once per epoch; when C does not divide L, the epoch's
    last batch is completed with classes of its first batch (never a class
    already in that batch). Batches are class-major: indices
    `[c * k:(c + 1) * k]` share a class.

    Samples: a class's k samples in a batch are distinct. Its appearances are
    grouped in passes of `floor(n_c / k)` over a fresh permutation of its
    n_c samples, so no sample repeats within a pass and all are drawn equally
    often (the `n_c mod k` left over sit out a random pass). A class that
    completes an epoch's last batch draws k distinct random samples for that
    extra appearance. Classes with fewer than k samples are drawn with
    replacement (`small_classes="replace"`) or left out (`"drop"`).

    Args:
        labels: Integer label per sample, shape `(N,)`.
        classes_per_batch: C, distinct classes per batch.
        samples_per_class: k, samples per class.
        small_classes: `"replace"` or `"drop"` for classes with fewer than k
            samples; their count is `num_small_classes` (and a warning is
            issued). Defaults to `"replace"`.
        seed: Integer seed; the same seed gives the same stream. Defaults to
            `None` (fresh entropy).

    Attributes:
        class_values: The sorted distinct labels; class index `c` is
            `class_values[c]`.
        counts, offsets, members: Class `c`'s samples are
            `members[offsets[c]:offsets[c] + counts[c]]`.
        batches_per_epoch: `ceil(num_classes / C)`.

    Examples:

    >>> sampler = ClassBalancedSampler(np.repeat(np.arange(10), 5), 4, 2, seed=0)
    >>> sampler.numpy_batch(7).shape  # batch 7, in NumPy
    (8,)
    >>> sampler.next_batch().shape  # NumPy, the next batch of the stream
    (8,)
    >>> sampler.batch(7).shape  # batch 7 in TF ops (usable in tf.data)  # doctest: +SKIP
    TensorShape([8])
    >>> sampler.numpy_epoch(2).shape  # the batches_per_epoch batches of epoch 2
    (3, 8)
    """

    def __init__(self, labels, classes_per_batch, samples_per_class,
                 small_classes="replace", seed=None):
        labels = np.asarray(labels)
        if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(
                "labels must be a 1-D integer array; got shape "
                f"{labels.shape} and dtype {labels.dtype}."
            )
        for name, value in (("classes_per_batch", classes_per_batch),
                            ("samples_per_class", samples_per_class)):
            integer_at_least(name, value, 1, strict=True)
        if small_classes not in ("replace", "drop"):
            raise ValueError(
                f"small_classes must be 'replace' or 'drop'; got {small_classes!r}."
            )
        self.classes_per_batch = int(classes_per_batch)
        self.samples_per_class = int(samples_per_class)
        self.batch_size = self.classes_per_batch * self.samples_per_class
        self.small_classes = small_classes

        self.class_values, inverse = np.unique(labels, return_inverse=True)
        self.counts = np.bincount(inverse).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]]).astype(np.int64)
        self.members = np.argsort(inverse, kind="stable").astype(np.int64)

        small = self.counts < self.samples_per_class
        self.num_small_classes = int(small.sum())
        usable = np.flatnonzero(~small) if small_classes == "drop" else np.arange(
            len(self.counts))
        if self.num_small_classes:
            action = ("drawn with replacement" if small_classes == "replace"
                      else "left out")
            warnings.warn(
                f"{self.num_small_classes} of {len(self.counts)} classes have fewer "
                f"than samples_per_class={self.samples_per_class} samples; they are "
                f"{action} (small_classes={small_classes!r}).",
                stacklevel=2,
            )
        if len(usable) < self.classes_per_batch:
            raise ValueError(
                f"classes_per_batch={self.classes_per_batch} but only "
                f"{len(usable)} classes are usable (of {len(self.counts)}; "
                f"small_classes={small_classes!r})."
            )
        self.usable_classes = usable.astype(np.int64)
        self.num_classes = len(usable)
        self.batches_per_epoch = -(-self.num_classes // self.classes_per_batch)
        words = np.random.SeedSequence(seed).generate_state(2, np.uint32)
        self._class_seed, self._sample_seed = (int(w) for w in words)
        self.step = 0

    # -- TF ops: usable inside tf.data and tf.function ------------------------------
    def batch(self, step):
        """The `C * k` sample indices of batch `step` (int64, class-major), in TF ops."""
        return self._batch(_tensorflow_ops(), step)

    def epoch(self, epoch):
        """Every batch of `epoch` at once, in TF ops: int64 `(batches_per_epoch, C * k)`,
        row `i` being `batch(epoch * batches_per_epoch + i)`. One sort of the classes and
        one of their samples serve the whole epoch (`batch` sorts the classes again for
        each batch)."""
        return self._epoch(_tensorflow_ops(), epoch)

    def classes_at(self, epoch, positions):
        """Class indices at `positions` of the random order of `epoch`, in TF ops."""
        return self._classes_at(_tensorflow_ops(), epoch, positions)

    def samples_of(self, classes, appearances, extra=None):
        """k distinct sample indices per class (class-major, flat `(len * k,)`), in TF ops.

        Args:
            classes: `(n,)` class indices.
            appearances: `(n,)` the appearance number of each class (the pass is
                `appearance // floor(n_c / k)`, the slot in it the remainder).
            extra: `(n,)` bool, True for an extra appearance (k random samples,
                outside the passes). Defaults to none.
        """
        return self._samples_of(_tensorflow_ops(), classes, appearances, extra)

    # -- NumPy: the same batches without TensorFlow --------------------------------
    def numpy_batch(self, step):
        """`batch(step)` computed in NumPy: the same int64 indices."""
        return self._batch(_NUMPY_OPS, step)

    def numpy_epoch(self, epoch):
        """`epoch(epoch)` computed in NumPy: the same int64 indices."""
        return self._epoch(_NUMPY_OPS, epoch)

    def numpy_classes_at(self, epoch, positions):
        """`classes_at` computed in NumPy."""
        return self._classes_at(_NUMPY_OPS, epoch, positions)

    def numpy_samples_of(self, classes, appearances, extra=None):
        """`samples_of` computed in NumPy."""
        return self._samples_of(_NUMPY_OPS, classes, appearances, extra)

    def next_batch(self):
        """Batch `self.step` as a NumPy array; advances `self.step`."""
        out = self.numpy_batch(self.step)
        self.step += 1
        return out

    def __iter__(self):
        while True:
            yield self.next_batch()

    # -- The arithmetic, written once for both -------------------------------------
    def _batch(self, xp, step):
        step = xp.int64(step)
        per_epoch = self.batches_per_epoch
        epoch, index = step // per_epoch, step % per_epoch
        positions = index * self.classes_per_batch + xp.arange(self.classes_per_batch)
        return self._at_positions(xp, epoch, positions)

    def _epoch(self, xp, epoch):
        positions = xp.arange(self.batches_per_epoch * self.classes_per_batch)
        return xp.reshape(self._at_positions(xp, epoch, positions),
                          [self.batches_per_epoch, self.batch_size])

    def _at_positions(self, xp, epoch, positions):
        """The samples of the classes at `positions` (< batches_per_epoch * C) of epoch
        `epoch`'s order, class-major: each class's k samples depend on the class and the
        epoch only, so any set of positions gives the same samples per class."""
        # The last batch of an epoch is completed with the epoch's first classes.
        extra = positions >= self.num_classes
        positions = xp.where(extra, positions - self.num_classes, positions)
        classes = self._classes_at(xp, epoch, positions)
        appearance = positions * 0 + xp.int64(epoch)
        return self._samples_of(xp, classes, appearance, extra)

    def _classes_at(self, xp, epoch, positions):
        # The epoch's order: the usable classes sorted by a key hashed from
        # (seed, epoch, position); keys are distinct (the hash is a bijection of
        # the position for a fixed seed and epoch), so both argsorts agree.
        epoch = xp.int64(epoch)
        epoch_key = xp.hash(xp.hash(self._class_seed, epoch), epoch // 2 ** 32)
        keys = xp.int64(xp.hash(epoch_key, xp.arange(self.num_classes)))
        order = xp.gather(self.usable_classes, xp.argsort(keys))
        return xp.gather(order, xp.int64(positions))

    def _samples_of(self, xp, classes, appearances, extra=None):
        classes = xp.int64(classes)
        appearances = xp.int64(appearances)
        if extra is None:
            extra = classes < 0  # all False
        k = self.samples_per_class
        counts = xp.gather(self.counts, classes)
        offsets = xp.gather(self.offsets, classes)
        slots_per_pass = xp.maximum(counts // k, 1)
        passes = xp.where(extra, 2 * appearances + 1, 2 * (appearances // slots_per_pass))
        slots = xp.where(extra, appearances * 0, appearances % slots_per_pass)
        # One random key per member of each class, fixed by (seed, class, pass):
        # sorting a class's members by key is the pass's permutation of them.
        row_keys = xp.hash(xp.hash(xp.hash(self._sample_seed, classes), passes),
                           passes // 2 ** 32)
        rows = xp.repeat(xp.arange(xp.size(classes)), counts)
        row_starts = xp.cumsum(counts) - counts
        member = xp.arange(xp.sum(counts)) - xp.gather(row_starts, rows)
        keys = xp.int64(xp.hash(xp.gather(row_keys, rows), member))
        order = xp.int64(xp.argsort(rows * 2 ** 32 + keys))  # rows in place, members shuffled
        picks = (row_starts + slots * k)[:, None] + xp.arange(k)
        picks = xp.minimum(picks, (row_starts + counts - 1)[:, None])  # small classes
        within = xp.gather(order, picks) - row_starts[:, None]  # (n, k) in [0, count)
        if self.num_small_classes and self.small_classes == "replace":
            draws = xp.int64(xp.hash(row_keys[:, None], xp.arange(k)))
            within = xp.where((counts < k)[:, None], draws % counts[:, None], within)
        return xp.reshape(xp.gather(self.members, offsets[:, None] + within), [-1])


_GOLDEN = 0x9E3779B9
_LOWBIAS32 = ((16, 0x7FEB352D), (15, 0x846CA68B))  # Wellons' lowbias32


class _NumpyOps:
    """The few array operations the sampler uses, in NumPy (int64 unless named)."""

    @staticmethod
    def int64(x):
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def arange(n):
        return np.arange(n, dtype=np.int64)

    @staticmethod
    def hash(seed, values):
        """A 32-bit hash of `(seed, values)` (uint32 `seed` broadcast against int
        `values`; only their low 32 bits count): stateless per-element randomness."""
        with np.errstate(over="ignore"):
            x = np.asarray(seed).astype(np.uint32) ^ (
                np.asarray(values).astype(np.uint32) * np.uint32(_GOLDEN))
            for shift, multiplier in _LOWBIAS32:
                x = (x ^ (x >> np.uint32(shift))) * np.uint32(multiplier)
            return x ^ (x >> np.uint32(16))

    gather = staticmethod(lambda params, indices: np.asarray(params)[indices])
    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    repeat = staticmethod(np.repeat)
    cumsum = staticmethod(np.cumsum)
    sum = staticmethod(np.sum)
    size = staticmethod(np.size)
    argsort = staticmethod(lambda x: np.argsort(x, kind="stable"))
    reshape = staticmethod(np.reshape)


_NUMPY_OPS = _NumpyOps()


class _TensorFlowOps:
    """`_NumpyOps` in TF ops (usable inside tf.data and tf.function)."""

    def __init__(self, tf):
        self.tf = tf

    def int64(self, x):
        return self.tf.cast(x, self.tf.int64)

    def arange(self, n):
        return self.tf.range(n, dtype=self.tf.int64)

    def hash(self, seed, values):
        """`_NumpyOps.hash` in TF ops: the same uint32 values."""
        tf = self.tf

        def u32(value):
            return tf.constant(value, tf.uint32)

        seed = u32(seed) if isinstance(seed, int) else tf.cast(seed, tf.uint32)
        x = tf.bitwise.bitwise_xor(seed, tf.cast(values, tf.uint32) * u32(_GOLDEN))
        for shift, multiplier in _LOWBIAS32:
            x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, u32(shift))) * u32(multiplier)
        return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, u32(16)))

    def gather(self, params, indices):
        return self.tf.gather(params, indices)

    def where(self, condition, x, y):
        return self.tf.where(condition, x, y)

    def maximum(self, x, y):
        return self.tf.maximum(x, y)

    def minimum(self, x, y):
        return self.tf.minimum(x, y)

    def repeat(self, values, counts):
        return self.tf.repeat(values, counts)

    def cumsum(self, x):
        return self.tf.cumsum(x)

    def sum(self, x):
        return self.tf.reduce_sum(x)

    def size(self, x):
        return self.tf.size(x, out_type=self.tf.int64)

    def argsort(self, x):
        return self.tf.argsort(x, stable=True)

    def reshape(self, x, shape):
        return self.tf.reshape(x, shape)


def _tensorflow_ops():
    # TensorFlow is already loaded inside tf.data / tf.function: no import to trace.
    tf = sys.modules.get("tensorflow") or backend.require_tensorflow(
        "ClassBalancedSampler.batch (TF ops)")
    return _TensorFlowOps(tf)
