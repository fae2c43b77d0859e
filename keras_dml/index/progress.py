"""`Progress`, the one progress line of every embedding: `keras_dml.inference.progress`."""

from keras_dml.inference.progress import Progress

__all__ = ["Progress"]
