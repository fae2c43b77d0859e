"""What a training stream does with an image that cannot be read or decoded."""

import sys
import weakref

import numpy as np

from keras_dml import backend
from keras_dml.data.image_errors import (BadImageError, clear_data_error,  # noqa: F401
                                         clear_error, skipped_sentence)

__all__ = ["BadImageError", "BadImageGuard", "MAX_BAD_BATCHES_IN_A_ROW", "SKIP_HINT", "drop_bad",
           "guards_made", "only_x_y", "refill", "skipped_files"]

tf = backend.require_tensorflow("keras_dml.data's image-file reading")

#: Consecutive skipped batches after which the data is declared broken: a
#: stream whose every batch holds a bad file fails instead of hanging.
MAX_BAD_BATCHES_IN_A_ROW = 20

#: The way out a `BadImageError` ends with; the command line rewrites it for each
#: command that has `--skip-bad-images`.
SKIP_HINT = ", or skip the bad files with skip_bad_images=True (CLI: --skip-bad-images)"

#: Every guard made since the interpreter started, for `skipped_files`: the run's
#: streams (training batches, evaluation sets) are built inside library code.
_GUARDS = []


class BadImageGuard:
    """Checks each batch's `ok` flags; raises, or skips the bad files and says so.

    Default (`skip=False`): the first bad image is a `BadImageError` naming it
    (index and path) and the way out. With `skip=True` each bad file is
    reported once on stderr and left out: the stream has replaced it by
    another image of its class in the same batch (training, `refill`) or
    dropped it (evaluation, `drop_bad`). A training batch in which a class has
    no readable image is skipped; after `MAX_BAD_BATCHES_IN_A_ROW` such batches
    in a row it raises, naming the bad files seen.

    The check runs where the batch is taken (a `map` after the prefetch, in the
    consumer's call), never in a tf.data worker thread: a `py_function` there
    needs the GIL, which the main thread may hold while it deletes the iterator
    and waits for that worker (a deadlock at exit after an error).

    In a `tf.data` pipeline the error reaches the caller as a
    `tf.errors.InvalidArgumentError` whose message holds the same text;
    `DMLModel.fit` and the evaluation functions raise it as the
    `BadImageError` (`clear_error`).

    Attributes:
        bad: `{source index: description}` of every bad file seen, in order.
        paths: The source's file paths (given to the constructor), or None.
        skipped_batches: Training batches skipped (a class without a readable
            image in them).
    """

    def __init__(self, describe, skip=False, limit=MAX_BAD_BATCHES_IN_A_ROW, paths=None):
        self.describe = describe
        self.paths = paths
        self.skip = skip
        self.limit = limit
        self.skipped_batches = 0
        self.bad = {}
        self._in_a_row = 0
        if skip:
            _GUARDS.append(weakref.ref(self))

    def check(self, batch_id, indices, ok, usable=True):
        """True to keep the batch; False to skip it; raises when it must stop.

        `usable` is False when a class of the batch has no readable image left.
        """
        ok = np.asarray(ok)
        if ok.all():
            self._in_a_row = 0
            return True
        indices = np.asarray(indices)
        new = [int(i) for i in np.unique(indices[~ok]) if int(i) not in self.bad]
        for i in new:
            self.bad[i] = self.describe(i)
        if not self.skip:
            names = "; ".join(self.bad[int(i)] for i in np.unique(indices[~ok])[:3])
            raise BadImageError(
                f"keras_dml.data: cannot read or decode {names} (batch {int(batch_id)}). "
                "Fix or remove the file (keras_dml.data.verify_images or `keras-dml verify "
                f"DIR|CSV` lists every bad file in one pass){SKIP_HINT}.")
        for seen, i in enumerate(new, len(self.bad) - len(new) + 1):
            print(f"keras_dml.data: {skipped_sentence(self.name(i))} ({seen} so far)",
                  file=sys.stderr, flush=True)
        if bool(usable):
            self._in_a_row = 0
            return True
        self.skipped_batches += 1
        self._in_a_row += 1
        if self._in_a_row >= self.limit:
            shown = "; ".join(list(self.bad.values())[:5])
            raise BadImageError(
                f"keras_dml.data: {self._in_a_row} batches in a row held a class without a "
                f"readable image ({len(self.bad)} bad files so far, e.g. {shown}); the data "
                "looks broken, stopping.")
        return False

    def name(self, index):
        """The bad file at `index`: its path, or its description without paths."""
        return self.describe(index) if self.paths is None else str(self.paths[index])

    def keep(self, batch_id, indices, ok, usable=True):
        """The graph side of `check`: a scalar bool tensor.

        The error is raised by an assertion on the message `check` would raise, not
        inside the `py_function`: TensorFlow logs a `py_function`'s Python traceback
        (two or three times) before the error reaches the caller.
        """
        keep, error = tf.py_function(self._verdict, [batch_id, indices, ok, usable],
                                     (tf.bool, tf.string))
        keep.set_shape([])
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(error, ""), [error])]):
            return tf.identity(keep)

    def _verdict(self, batch_id, indices, ok, usable):
        """`(keep, error message or "")`."""
        try:
            return self.check(batch_id, indices, ok, usable), ""
        except BadImageError as error:
            return False, str(error)

    def stream(self, batches, every_batch=False):
        """Prefetched `(x, y)` batches of `batches`, each checked as it is taken.

        `batches` is a dataset of `(batch_id, indices, ok, x, y)`, or with `skip`
        of `(batch_id, indices, ok, usable, x, y)`: a batch whose `usable` is
        False is left out, unless `every_batch` (evaluation: the stream keeps its
        known length). A bad file in a batch that was prefetched but never used
        (the batch after `fit`'s last step) raises nothing and logs no traceback.
        """
        batches = batches.prefetch(tf.data.AUTOTUNE)
        if self.skip and not every_batch:
            return batches.filter(self._kept).map(_last_two)
        return batches.map(self._checked)

    @tf.autograph.experimental.do_not_convert
    def _kept(self, batch_id, indices, ok, usable, x, y):
        return self.keep(batch_id, indices, ok, usable)

    @tf.autograph.experimental.do_not_convert
    def _checked(self, batch_id, indices, ok, *usable_x_y):
        with tf.control_dependencies([self.keep(batch_id, indices, ok, *usable_x_y[:-2])]):
            return tf.identity(usable_x_y[-2]), tf.identity(usable_x_y[-1])


@tf.autograph.experimental.do_not_convert
def _last_two(*batch):
    return batch[-2], batch[-1]


def refill(x, y, ok):
    """`(x, usable)`: each unreadable image of a C x k batch replaced by the first
    readable image of its class in the batch (labels unchanged, the batch still
    C x k); `usable` is False when some class has no readable image in it."""
    readable_same_class = tf.logical_and(tf.equal(y[:, None], y[None, :]), ok[None, :])
    has_one = tf.reduce_any(readable_same_class, axis=1)
    first = tf.argmax(tf.cast(readable_same_class, tf.int32), axis=1, output_type=tf.int32)
    source = tf.where(ok, tf.range(tf.shape(y)[0], dtype=tf.int32), first)
    return tf.gather(x, source), tf.reduce_all(has_one)


def drop_bad(ok, x, y):
    """`(x, y)` without the images that could not be read (evaluation)."""
    return tf.boolean_mask(x, ok), tf.boolean_mask(y, ok)


def guards_made():
    """A mark for `skipped_files`: the number of skipping guards made so far."""
    return len(_GUARDS)


def skipped_files(since=0):
    """The bad files the `skip_bad_images=True` streams made after the mark `since`
    (`guards_made()`) left out, each once, in the order met: their paths (a stream
    of another source: descriptions such as "element 3 of the tf.data.Dataset
    source")."""
    seen = {}
    for ref in _GUARDS[since:]:
        guard = ref()
        for index in (guard.bad if guard is not None else ()):
            seen.setdefault(guard.name(index), None)
    return list(seen)


@tf.autograph.experimental.do_not_convert
def only_x_y(batch_id, indices, ok, x, y):
    """The `(x, y)` of a `(batch_id, indices, ok, x, y)` batch."""
    return x, y
