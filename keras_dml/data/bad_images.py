"""What a training stream does with an image that cannot be read or decoded."""

import sys

import numpy as np
import tensorflow as tf

#: Consecutive skipped batches after which the data is declared broken: a
#: stream whose every batch holds a bad file fails instead of hanging.
MAX_BAD_BATCHES_IN_A_ROW = 20


class BadImageGuard:
    """Checks each batch's `ok` flags; raises, or skips with a counted warning.

    Default (`skip=False`): the first bad image is a `ValueError` naming it
    (index and path) and the way out. With `skip=True` a batch holding a bad
    image is dropped and a running count is printed to stderr; after
    `MAX_BAD_BATCHES_IN_A_ROW` dropped batches in a row it raises, naming
    the bad files seen.

    In a `tf.data` pipeline the `ValueError` reaches the caller as a
    `tf.errors.InvalidArgumentError` whose message holds the same text.
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
            raise ValueError(
                f"keras_dml.data: cannot read or decode {names} (batch {int(batch_id)}). "
                "Fix or remove the file, drop bad files up front with "
                "keras_dml.data.verify_images, or skip batches holding them with "
                "skip_bad_images=True (CLI: --skip-bad-images).")
        self.skipped_batches += 1
        self._in_a_row += 1
        if self._in_a_row >= self.limit:
            shown = "; ".join(list(self.bad.values())[:5])
            raise ValueError(
                f"keras_dml.data: {self._in_a_row} batches in a row held images that "
                f"cannot be read or decoded ({len(self.bad)} bad files so far, e.g. "
                f"{shown}); the data looks broken, stopping.")
        print(f"keras_dml.data: skipped batch {int(batch_id)} holding {names}; "
              f"{self.skipped_batches} batch(es) skipped so far, {len(self.bad)} bad "
              "file(s).", file=sys.stderr, flush=True)
        return False

    def keep(self, batch_id, indices, ok):
        """The graph side of `check`: a scalar bool tensor."""
        keep = tf.py_function(self.check, [batch_id, indices, ok], tf.bool)
        keep.set_shape([])
        return keep


def clear_error(error):
    """The `ValueError` a `BadImageGuard` raised inside a `tf.data` pipeline, taken
    out of the `tf.errors.OpError` that carries it; `None` for any other error."""
    message = getattr(error, "message", str(error))
    start = message.find("keras_dml.data: ")
    if start < 0:
        return None
    return ValueError(message[start:].splitlines()[0])
