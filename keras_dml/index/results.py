"""`SearchResult`: what `Index.search` returns."""

import dataclasses

import numpy as np

__all__ = ["SearchResult"]


@dataclasses.dataclass(frozen=True)
class SearchResult:
    """The k nearest gallery items of each query, best first.

    Attributes:
        ids: `(queries, k)` item ids (int64, or str for string ids).
        scores: float32 `(queries, k)` the ranking's scores, higher is closer:
            the similarities, or a re-ranked search's re-ranking scores
            (`keras_dml.index.rerank`).
        labels: `(queries, k)` labels (int64, or str for string labels).
        metadata: `queries` lists of k metadata values (None where none was given).
        similarities: float32 `(queries, k)` similarities of the items to the
            queries (cosine similarity, inner product, or minus the squared
            Euclidean distance, on every backend): what thresholds apply to,
            re-ranked or not. Defaults to `scores`.
    """

    ids: np.ndarray
    scores: np.ndarray
    labels: np.ndarray
    metadata: list
    similarities: np.ndarray = None

    def __post_init__(self):
        if self.similarities is None:
            object.__setattr__(self, "similarities", self.scores)
