"""Deep metric learning datasets with the papers' class-disjoint splits.

`load(name, data_dir=None, split=None)` returns a `DMLSplits` with `.train`
and `.test` `LabeledImages`.
"""

from keras_dml.datasets.base import DMLSplits, LabeledImages
from keras_dml.datasets.registry import available, load

__all__ = ["DMLSplits", "LabeledImages", "available", "load"]
