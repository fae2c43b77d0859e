"""Figures for deep metric learning (matplotlib, the `plots` extra).

Each function writes a PNG and returns the data it drew, so tests can check both.
"""

import importlib

_FUNCTIONS = {
    "weight_curves": "keras_dml.plots.weights",
    "recall_curves": "keras_dml.plots.retrieval",
    "tsne_map": "keras_dml.plots.retrieval",
    "retrieval_grid": "keras_dml.plots.retrieval",
    "verification_curves": "keras_dml.plots.verification",
    "score_histograms": "keras_dml.plots.verification",
    "worst_queries": "keras_dml.plots.failures",
    "per_class_bars": "keras_dml.plots.failures",
    "confused_pairs": "keras_dml.plots.failures",
    "write_report": "keras_dml.plots.report",
}


__all__ = sorted(_FUNCTIONS)


def __getattr__(name):
    if name in _FUNCTIONS:
        return getattr(importlib.import_module(_FUNCTIONS[name]), name)
    raise AttributeError(f"module 'keras_dml.plots' has no attribute {name!r}")


def __dir__():
    return sorted(_FUNCTIONS)
