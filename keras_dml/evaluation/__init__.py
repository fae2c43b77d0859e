"""Retrieval and clustering evaluation for deep metric learning."""

from keras_dml.evaluation.clustering import nmi
from keras_dml.evaluation.collapse import collapse_warning, embedding_spread
from keras_dml.evaluation.embedding import embed_dataset, evaluate_retrieval
from keras_dml.evaluation.knn import iter_nearest_neighbors, nearest_neighbors
from keras_dml.evaluation.query_gallery import RetrievalReport, retrieval_report
from keras_dml.evaluation.retrieval import METRICS, retrieval_metrics
from keras_dml.evaluation.verification import (
    Calibration,
    calibrate,
    calibrate_scores,
    pair_scores,
    verification_metrics,
)

__all__ = [
    "METRICS",
    "Calibration",
    "RetrievalReport",
    "calibrate",
    "calibrate_scores",
    "collapse_warning",
    "pair_scores",
    "verification_metrics",
    "embed_dataset",
    "embedding_spread",
    "evaluate_retrieval",
    "iter_nearest_neighbors",
    "nearest_neighbors",
    "nmi",
    "retrieval_metrics",
    "retrieval_report",
]
