"""scikit-learn's 8x8 handwritten digits: a bundled, download-free DML set."""

import numpy as np

from keras_dml.datasets.base import DMLSplits, labeled_from_raw

__all__ = ["load_digits_splits"]


def load_digits_splits(data_dir=None, source="auto"):
    """Loads the 1,797 8x8 digits with a class-disjoint split.

    Digits 0-4 train, 5-9 test. Images are float32 `(N, 8, 8, 1)` in [0, 1]
    (the raw 0..16 intensities divided by 16).

    Args:
        data_dir: Ignored (the data ships with scikit-learn).
        source: Ignored.

    Returns:
        A `DMLSplits`.
    """
    del data_dir, source
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = (bunch.images / 16.0).astype(np.float32)[..., None]
    target = bunch.target.astype(np.int64)
    names = {d: str(d) for d in range(10)}
    train = target < 5
    return DMLSplits(
        name="digits",
        train=labeled_from_raw(target[train], images=images[train], names=names),
        test=labeled_from_raw(target[~train], images=images[~train], names=names),
    )
