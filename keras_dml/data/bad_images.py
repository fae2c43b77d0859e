"""What a training stream does with an image that cannot be read or decoded."""

import sys

import numpy as np

from keras_dml import backend

tf = backend.require_tensorflow("keras_dml.data's image-file reading")

#: Consecutive skipped batches after which the data is declared broken: a
#: stream whose every batch holds a bad file fails instead of hanging.
MAX_BAD_BATCHES_IN_A_ROW = 20

#: The way out a `BadImageError` ends with; the command line rewrites it for each
#: command (`--skip-bad-images` is `keras-dml train`'s alone).
SKIP_HINT = ", or skip batches holding them with skip_bad_images=True (CLI: --skip-bad-images)"


class BadImageError(ValueError):
    """An image file of a keras_dml stream is missing or cannot be decoded."""


class BadImageGuard:
    """Checks each batch's `ok` flags; raises, or skips with a counted warning.

    Default (`skip=False`): the first bad image is a `BadImageError` naming it
    (index and path) and the way out. With `skip=True` a batch holding a bad
    image is dropped and a running count is printed to stderr; after
    `MAX_BAD_BATCHES_IN_A_ROW` dropped batches in a row it raises, naming
    the bad files seen.

    In a `tf.data` pipeline the error reaches the caller as a
    `tf.errors.InvalidArgumentError` whose message holds the same text;
    `DMLModel.fit` and the evaluation functions raise it as the
    `BadImageError` (`clear_error`).
    """

    def __init__(self, describe, skip=False, limit=MAX_BAD_BATCHES_IN_A_ROW):
        self.describe = describe
        self.skip = skip
        self.limit = limit
        self.skipped_batches = 0
        self.bad = {}
        self._in_a_row = 0

    def check(self, batch_id, indices, ok):
        """True to keep the batch; False to skip it; raises when it must stop."""
        ok = np.asarray(ok)
        if ok.all():
            self._in_a_row = 0
            return True
        indices = np.asarray(indices)
        new = [int(i) for i in np.unique(indices[~ok])]
        for i in new:
            self.bad.setdefault(i, self.describe(i))
        names = "; ".join(self.bad[i] for i in new[:3])
        if not self.skip:
            raise BadImageError(
                f"keras_dml.data: cannot read or decode {names} (batch {int(batch_id)}). "
                "Fix or remove the file (keras_dml.data.verify_images finds bad files up "
                f"front){SKIP_HINT}.")
        self.skipped_batches += 1
        self._in_a_row += 1
        if self._in_a_row >= self.limit:
            shown = "; ".join(list(self.bad.values())[:5])
            raise BadImageError(
                f"keras_dml.data: {self._in_a_row} batches in a row held images that "
                f"cannot be read or decoded ({len(self.bad)} bad files so far, e.g. "
                f"{shown}); the data looks broken, stopping.")
        print(f"keras_dml.data: skipped batch {int(batch_id)} holding {names}; "
              f"{self.skipped_batches} batch(es) skipped so far, {len(self.bad)} bad "
              "file(s).", file=sys.stderr, flush=True)
        return False

    def keep(self, batch_id, indices, ok):
        """The graph side of `check`: a scalar bool tensor.

        The error is raised by an assertion on the message `check` would raise, not
        inside the `py_function`: TensorFlow logs a `py_function`'s Python traceback
        (two or three times) before the error reaches the caller.
        """
        keep, error = tf.py_function(self._verdict, [batch_id, indices, ok],
                                     (tf.bool, tf.string))
        keep.set_shape([])
        with tf.control_dependencies([tf.debugging.Assert(tf.equal(error, ""), [error])]):
            return tf.identity(keep)

    def _verdict(self, batch_id, indices, ok):
        """`(keep, error message or "")`."""
        try:
            return self.check(batch_id, indices, ok), ""
        except BadImageError as error:
            return False, str(error)

    def stream(self, batches):
        """Prefetched `(x, y)` batches of `batches`, a dataset of `(batch_id, indices,
        ok, x, y)`, each checked.

        Without `skip`, a batch is checked as it is taken (a map after the prefetch
        runs in the consumer's call): a bad file in a batch that was prefetched but
        never used (the batch after `fit`'s last step) raises nothing and logs no
        traceback. With `skip`, which batches follow depends on the check, so it is
        made before the prefetch.
        """
        if self.skip:
            batches = batches.filter(tf.autograph.experimental.do_not_convert(
                lambda batch_id, indices, ok, x, y: self.keep(batch_id, indices, ok)))
            return batches.map(only_x_y).prefetch(tf.data.AUTOTUNE)
        return batches.prefetch(tf.data.AUTOTUNE).map(self._checked)

    @tf.autograph.experimental.do_not_convert
    def _checked(self, batch_id, indices, ok, x, y):
        with tf.control_dependencies([self.keep(batch_id, indices, ok)]):
            return tf.identity(x), tf.identity(y)


@tf.autograph.experimental.do_not_convert
def only_x_y(batch_id, indices, ok, x, y):
    """The `(x, y)` of a `(batch_id, indices, ok, x, y)` batch."""
    return x, y


def clear_data_error(error):
    """The error naming the bad image file that a tf.data pipeline failed on, else None."""
    tf = sys.modules.get("tensorflow")
    if tf is None or not isinstance(error, tf.errors.OpError):
        return None
    return clear_error(error)


def clear_error(error):
    """The `BadImageError` a `BadImageGuard` raised inside a `tf.data` pipeline, taken
    out of the `tf.errors.OpError` that carries it; `None` for any other error."""
    message = getattr(error, "message", str(error))
    start = message.find("keras_dml.data: ")
    if start < 0:
        return None
    # The assertion prints its message as data: within [...], its quotes escaped.
    return BadImageError(message[start:].splitlines()[0].rstrip("]").replace("\\'", "'"))
