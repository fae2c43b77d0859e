"""`RunEvaluation`: the run's retrieval evaluation, before training and after each epoch."""

import time

import numpy as np

from keras_dml import backend, data, evaluation
from keras_dml.callbacks import RecallAtK
from keras_dml.evaluation.collapse import TRAIN_CAUSES
from keras_dml.inference import embed_finite
from keras_dml.training.clock import Clock

__all__ = ["KS", "RunEvaluation"]

KS = (1, 2, 4, 8)


class RunEvaluation(RecallAtK):
    """`RecallAtK` with the run's protocol, a progress bar, and the last embeddings kept.

    `evaluate_now()` returns the metrics (counts included) and keeps the query
    embeddings in `embeddings`; the epoch logs get `val_recall@1`, ... as from
    `RecallAtK`, and `history` starts with the untrained point (epoch -1) once
    `record_untrained` has been called.
    """

    def __init__(self, queries, references, preprocessing, transform, progress=True,
                 clock=None):
        def batches(split):
            if backend.is_tensorflow() or split.images is None:
                return data.evaluation_batches(split, preprocessing, transform=transform)
            return transform(split.images, np.asarray(split.labels, np.int32))  # NumPy

        super().__init__(batches(queries), ks=KS, verbose=0,
                         gallery_data=None if references is None else batches(references))
        self.progress = progress
        self.collapse_causes = TRAIN_CAUSES
        self.clock = clock or Clock()
        self.embeddings = None
        self.full_results = {}

    def _embed(self, dataset, what):
        if not self.progress:
            return embed_finite(self._forward, dataset)
        print(f"embedding {what}", flush=True)
        started = time.time()
        embeddings, labels = embed_finite(self._forward, dataset, progress=True)
        print(f"embedded {len(labels):,} images in {time.time() - started:.1f} s", flush=True)
        return embeddings, labels

    def evaluate_now(self, model=None):
        """Embeds queries (and references) now; returns `retrieval_metrics`."""
        if model is not None:
            self.embed_with_model(model)
        with self.clock.phase("evaluation"):
            self.embeddings, labels = self._embed(self.validation_data, "the evaluation images")
            self.check_collapse(self.embeddings)
            references = reference_labels = None
            if self.gallery_data is not None:
                references, reference_labels = self._embed(self.gallery_data, "the gallery")
            self.full_results = evaluation.retrieval_metrics(
                self.embeddings, labels, references, reference_labels, ks=self.ks)
        return self.full_results

    def evaluate(self):
        results = self.evaluate_now()
        return {f"{self.prefix}{key}": value for key, value in results.items()
                if key not in ("num_queries", "num_excluded_queries")}

    def record_untrained(self, metrics):
        """Puts the untrained network's metrics first in `history` (as epoch -1)."""
        self.history["epoch"].insert(0, -1)
        for key, value in metrics.items():
            if key not in ("num_queries", "num_excluded_queries"):
                self.history.setdefault(f"{self.prefix}{key}", []).insert(0, value)
