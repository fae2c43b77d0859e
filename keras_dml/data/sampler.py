"""Class-balanced index sampling in NumPy: C classes x k samples per batch.

Memory is O(number of samples): one flat array holding every class's
samples as a contiguous, shuffled segment, a cursor per class, and a queue
of classes. No per-class datasets are built, so SOP's 11,318 classes cost
nothing more than its 59,551 indices.
"""

import warnings

import numpy as np

from keras_dml.hyperparameters import integer_at_least


def draw_cyclic(segment, cursor, k, rng):
    """Takes `k` distinct items from a cyclic random permutation, in place.

    `segment[cursor:]` are the items not yet drawn in the current pass. When
    fewer than `k` remain, they are all taken and the rest of the batch comes
    from a fresh shuffle of the items already drawn, which then starts the
    next pass; so every item is drawn once before any repeats, and the `k`
    items are always distinct.

    Args:
        segment: 1-D array view, permuted in place.
        cursor: Number of items already drawn in the current pass.
        k: Number of items to take, `k <= len(segment)`.
        rng: `np.random.Generator`.

    Returns:
        `(items, new_cursor)`.
    """
    end = cursor + k
    if end <= len(segment):
        return segment[cursor:end].copy(), end
    rest = segment[cursor:].copy()
    used = rng.permutation(segment[:cursor])
    need = k - len(rest)
    segment[:need] = used[:need]
    segment[need:] = rng.permutation(np.concatenate([used[need:], rest]))
    return np.concatenate([rest, segment[:need]]), need


class ClassBalancedSampler:
    """Infinite stream of index batches with C distinct classes x k samples.

    Classes are drawn uniformly without replacement within an epoch over
    classes (every class appears before any repeats; across an epoch
    boundary the batch still has C distinct classes). The samples of each
    class are drawn the same way, so a batch holds k distinct samples per
    class. Batches are class-major: indices `[c * k:(c + 1) * k]` share a
    class.

    Args:
        labels: Integer label per sample, shape `(N,)`.
        classes_per_batch: C, distinct classes per batch.
        samples_per_class: k, samples per class.
        small_classes: What to do with classes that have fewer than k
            samples: `"replace"` draws their k samples with replacement,
            `"drop"` leaves them out. Defaults to `"replace"`. Their count is
            `num_small_classes` (and a warning is issued).
        seed: Seed of the NumPy generator; the same seed gives the same
            stream. Defaults to `None` (fresh entropy).

    Examples:

    >>> sampler = ClassBalancedSampler(np.repeat(np.arange(10), 5), 4, 2, seed=0)
    >>> sampler.next_batch().shape
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
        self._rng = np.random.default_rng(seed)

        self.class_values, inverse = np.unique(labels, return_inverse=True)
        self.counts = np.bincount(inverse).astype(np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)[:-1]])
        # Shuffle within classes: sort by (class, random key).
        self._pool = np.lexsort((self._rng.random(len(labels)), inverse))
        self._cursor = np.zeros(len(self.counts), np.int64)

        small = self.counts < self.samples_per_class
        self.num_small_classes = int(small.sum())
        eligible = np.flatnonzero(~small) if small_classes == "drop" else np.arange(
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
        if len(eligible) < self.classes_per_batch:
            raise ValueError(
                f"classes_per_batch={self.classes_per_batch} but only "
                f"{len(eligible)} classes are usable (of {len(self.counts)}; "
                f"small_classes={small_classes!r})."
            )
        self.num_classes = len(eligible)
        self._class_queue = self._rng.permutation(eligible)
        self._class_cursor = 0

    def next_batch(self):
        """The next batch of `C * k` sample indices (int64, class-major)."""
        return self.samples_of(self.next_classes())

    def next_classes(self):
        """The C distinct class indices (into `class_values`) of the next batch."""
        classes, self._class_cursor = draw_cyclic(
            self._class_queue, self._class_cursor, self.classes_per_batch, self._rng
        )
        return classes

    def samples_of(self, classes):
        """k distinct sample indices for each of `classes`, class-major, flat."""
        k = self.samples_per_class
        counts, cursors = self.counts[classes], self._cursor[classes]
        fits = cursors + k <= counts
        positions = np.empty((len(classes), k), np.int64)
        starts = self.offsets[classes[fits]] + cursors[fits]
        positions[fits] = starts[:, None] + np.arange(k)
        out = np.empty((len(classes), k), np.int64)
        out[fits] = self._pool[positions[fits]]
        self._cursor[classes[fits]] += k
        for row in np.flatnonzero(~fits):
            out[row] = self._draw_wrapping(classes[row])
        return out.reshape(-1)

    def _draw_wrapping(self, cls):
        start, count = self.offsets[cls], self.counts[cls]
        segment = self._pool[start:start + count]
        if count < self.samples_per_class:
            return self._rng.choice(segment, self.samples_per_class, replace=True)
        items, self._cursor[cls] = draw_cyclic(
            segment, self._cursor[cls], self.samples_per_class, self._rng
        )
        return items

    def __iter__(self):
        while True:
            yield self.next_batch()
