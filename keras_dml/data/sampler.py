"""Class-balanced index sampling: C classes x k samples per batch, step-indexed.

Batch `t` is a pure function of the seed and `t`, computed with stateless TF
random ops, so a `tf.data` pipeline draws it with no Python in the loop (a
Python generator in `tf.data` slows every later training step: see
benchmarks/README.md) and a resumed run regenerates batch `t` in O(1). Memory
is O(number of samples): one flat array of every class's members, no
per-class datasets, so SOP's 11,318 classes cost no more than its 59,551
indices.
"""

import warnings

import numpy as np
import tensorflow as tf

from keras_dml.hyperparameters import integer_at_least


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
    >>> sampler.batch(7).shape  # batch 7, in TF ops (usable in tf.data)
    TensorShape([8])
    >>> sampler.next_batch().shape  # NumPy, the next batch of the stream
    (8,)
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
        self._batch_fn = None

    # -- TF ops: usable inside tf.data and tf.function ------------------------------
    def batch(self, step):
        """The `C * k` sample indices of batch `step` (int64, class-major)."""
        step = tf.cast(step, tf.int64)
        per_epoch = self.batches_per_epoch
        epoch, index = step // per_epoch, step % per_epoch
        positions = index * self.classes_per_batch + tf.range(self.classes_per_batch,
                                                              dtype=tf.int64)
        # The last batch of an epoch is completed with the epoch's first classes.
        extra = positions >= self.num_classes
        positions = tf.where(extra, positions - self.num_classes, positions)
        classes = self.classes_at(epoch, positions)
        appearance = tf.fill([self.classes_per_batch], epoch)
        return self.samples_of(classes, appearance, extra)

    def classes_at(self, epoch, positions):
        """Class indices at `positions` of the random permutation of `epoch`."""
        order = tf.random.experimental.stateless_shuffle(
            tf.constant(self.usable_classes),
            seed=tf.stack([tf.constant(self._class_seed, tf.int64),
                           tf.cast(epoch, tf.int64)]))
        return tf.gather(order, positions)

    def samples_of(self, classes, appearances, extra=None):
        """k distinct sample indices per class (class-major, flat `(len * k,)`).

        Args:
            classes: `(n,)` class indices.
            appearances: `(n,)` the appearance number of each class (the pass is
                `appearance // floor(n_c / k)`, the slot in it the remainder).
            extra: `(n,)` bool, True for an extra appearance (k random samples,
                outside the passes). Defaults to none.
        """
        classes = tf.cast(classes, tf.int64)
        appearances = tf.cast(appearances, tf.int64)
        if extra is None:
            extra = tf.zeros_like(classes, tf.bool)
        k = self.samples_per_class
        counts = tf.gather(tf.constant(self.counts), classes)
        offsets = tf.gather(tf.constant(self.offsets), classes)
        slots_per_pass = tf.maximum(counts // k, 1)
        passes = tf.where(extra, 2 * appearances + 1, 2 * (appearances // slots_per_pass))
        slots = tf.where(extra, tf.zeros_like(appearances), appearances % slots_per_pass)
        # One random key per member of each class, fixed by (seed, class, pass):
        # sorting a class's members by key is the pass's permutation of them.
        row_keys = _hash(_hash(_hash(tf.constant(self._sample_seed, tf.uint32),
                                     classes), passes), passes // 2 ** 32)
        rows = tf.repeat(tf.range(tf.size(classes), dtype=tf.int64), counts)
        row_starts = tf.cumsum(counts, exclusive=True)
        member = tf.range(tf.reduce_sum(counts), dtype=tf.int64) - tf.gather(row_starts, rows)
        keys = tf.cast(_hash(tf.gather(row_keys, rows), member), tf.int64)
        order = tf.argsort(rows * 2 ** 32 + keys)  # rows stay in place, members shuffled
        order = tf.cast(order, tf.int64)
        picks = (row_starts + slots * k)[:, None] + tf.range(k, dtype=tf.int64)
        picks = tf.minimum(picks, (row_starts + counts - 1)[:, None])  # small classes
        within = tf.gather(order, picks) - row_starts[:, None]  # (n, k) in [0, count)
        if self.num_small_classes and self.small_classes == "replace":
            draws = tf.cast(_hash(row_keys[:, None], tf.range(k, dtype=tf.int64)), tf.int64)
            within = tf.where((counts < k)[:, None], draws % counts[:, None], within)
        return tf.reshape(tf.gather(tf.constant(self.members), offsets[:, None] + within), [-1])

    # -- NumPy ---------------------------------------------------------------------
    def next_batch(self):
        """Batch `self.step` as a NumPy array; advances `self.step`."""
        if self._batch_fn is None:
            self._batch_fn = tf.function(self.batch)
        out = self._batch_fn(tf.constant(self.step, tf.int64)).numpy()
        self.step += 1
        return out

    def __iter__(self):
        while True:
            yield self.next_batch()


def _hash(seed, values):
    """A 32-bit hash of `(seed, values)` (uint32 `seed` broadcast against int64
    `values`; only their low 32 bits count): stateless per-element randomness."""
    x = tf.bitwise.bitwise_xor(tf.cast(seed, tf.uint32),
                               tf.cast(values, tf.uint32) * tf.constant(0x9E3779B9, tf.uint32))
    for shift, multiplier in ((16, 0x7FEB352D), (15, 0x846CA68B)):  # lowbias32 (Wellons)
        x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(shift, tf.uint32)))
        x = x * tf.constant(multiplier, tf.uint32)
    return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, tf.constant(16, tf.uint32)))
