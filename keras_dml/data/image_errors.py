"""The error a bad image file raises, and its recovery from a failed tf.data pipeline.

Free of TensorFlow, so that the model and the evaluation (which run on every backend)
can recognise the error without importing the image-file streams.
"""

import sys

__all__ = ["BadImageError", "clear_data_error", "clear_error", "skipped_sentence"]

#: What each reason a file is left out for (`keras_dml.data.verify`, the dataset
#: loaders) says in a sentence.
_REASON_WORDS = {
    "missing": "no such file",
    "unreadable": "the file cannot be read",
    "empty": "the file is empty",
    "not an image": "not an image file",
    "cannot be decoded": "not a decodable image",
    "undecodable": "not a decodable image",
}


class BadImageError(ValueError):
    """An image file of a keras_dml stream is missing or cannot be decoded."""


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


def skipped_sentence(path, reason=None):
    """The one way a file left out by `skip_bad_images` is named: `"skipped PATH:
    WHY"` (`reason`, a short reason such as "missing", in words; without one, the
    file "cannot be read or decoded").

    Examples:

    >>> skipped_sentence("/shop/a.jpg", "missing")
    'skipped /shop/a.jpg: no such file'
    """
    why = "cannot be read or decoded" if reason is None else _REASON_WORDS.get(reason, reason)
    return f"skipped {path}: {why}"
