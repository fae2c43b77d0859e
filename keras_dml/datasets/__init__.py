"""Deep metric learning datasets with the papers' class-disjoint splits.

`load(name, data_dir=None, split=None)` returns a `DMLSplits` with `.train`
and `.test` `LabeledImages`; `from_directory(root)` and `from_csv(path)` give
the same for your own images (`root/<class>/<image>`, or a `path,label` list).
"""

from keras_dml.datasets.base import DMLSplits, LabeledImages
from keras_dml.datasets.files import from_csv, from_directory
from keras_dml.datasets.registry import available, load

__all__ = ["DMLSplits", "LabeledImages", "available", "from_csv", "from_directory", "load"]
