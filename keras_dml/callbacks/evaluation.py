"""Keras callbacks for deep metric learning: retrieval (`RecallAtK`) and verification
(`VerificationMetrics`) metrics in the epoch logs."""

import time
import warnings

import keras
import numpy as np

from keras_dml import hyperparameters, validation
from keras_dml.data.stream_preprocessing import (stream_preprocessing, warn_if_normalised_twice,
                                                  warn_if_prepared_otherwise)
from keras_dml.evaluation.collapse import CAUSES, collapse_warning
from keras_dml.inference import as_dataset, embed_finite, inference_function
from keras_dml.evaluation.retrieval import METRICS, check_metrics, retrieval_metrics
from keras_dml.evaluation.verification import FAR_TARGETS, pair_scores, verification_metrics

__all__ = ["RecallAtK", "VerificationMetrics"]

_COUNTS = ("num_queries", "num_excluded_queries")
_VERIFICATION_LOGGED = ("roc_auc", "eer", "best_f1", "best_f1_threshold")


class _EmbeddingCallback(keras.callbacks.Callback):
    """Embeds validation data with the model being trained (or `embedding_model`),
    in inference mode, after every `every_n_epochs`-th epoch."""

    def __init__(self, embedding_model, every_n_epochs, prefix, batch_size, steps):
        super().__init__()
        if embedding_model is not None and not callable(embedding_model):
            raise ValueError(f"model must be a model (a callable) or None, got "
                             f"{embedding_model!r}.")
        self.embedding_model = embedding_model
        self.every_n_epochs = hyperparameters.integer_at_least("every_n_epochs",
                                                               every_n_epochs, 1, strict=True)
        if not isinstance(prefix, str):
            raise ValueError(f"prefix must be a string, got {prefix!r}.")
        self.prefix = prefix
        self.batch_size = hyperparameters.integer_at_least("batch_size", batch_size, 1,
                                                           strict=True)
        if steps is not None:
            hyperparameters.integer_at_least("steps", steps, 1, strict=True)
        self._forward = None
        self._forward_of = None  # the model `_forward` embeds with

    def embed_with_model(self, model):
        """Embed with `model` from now on; its compiled inference function is kept while
        the model stays the same (each new one compiles again: a JAX jit, a tf.function)."""
        if self._forward is None or self._forward_of is not model:
            self._forward, self._forward_of = inference_function(model), model

    def set_model(self, model):
        super().set_model(model)
        self.embed_with_model(self.embedding_model or model)
        for data in (self.validation_data, getattr(self, "gallery_data", None)):
            warn_if_normalised_twice(self.embedding_model or model, stream_preprocessing(data))
            warn_if_prepared_otherwise(self.embedding_model or model, stream_preprocessing(data))

    def due(self, epoch):
        """Whether epoch `epoch` (0-based) is evaluated."""
        return (epoch + 1) % self.every_n_epochs == 0

    #: The ways out a collapse warning names (`keras_dml.evaluation.collapse.CAUSES`).
    collapse_causes = CAUSES

    def check_collapse(self, embeddings):
        """Warns (once per callback) when the evaluated embeddings have collapsed
        (`keras_dml.evaluation.collapse_warning`): the metrics are then at chance."""
        if getattr(self, "_collapse_warned", False) or len(embeddings) < 2:
            return
        message = collapse_warning(embeddings, self.collapse_causes)
        if message:
            self._collapse_warned = True
            warnings.warn(message, stacklevel=2)


class RecallAtK(_EmbeddingCallback):
    """Recall@K, Precision@1, R-Precision and MAP@R on validation data, per epoch.

    At the end of every `every_n_epochs`-th epoch the model embeds the
    validation data batch by batch (inference mode), `retrieval_metrics` ranks
    every validation sample against the others (leave-one-out) or against
    `gallery_data`, and the results enter the epoch logs as
    `val_recall@1`, ..., `val_precision@1`, `val_r_precision`, `val_map@r`. So
    `ModelCheckpoint(monitor="val_recall@1", mode="max")`, `EarlyStopping`,
    `CSVLogger`, `TensorBoard` and the `History` see them: list this callback
    before them. Other epochs cost one integer test.

    With `seen_classes`, the report is also split: validation samples of
    classes seen in training and of unseen classes are each evaluated among
    themselves (queries and references of the group only), as
    `val_seen_recall@1`, `val_unseen_recall@1`, ... A group without any
    evaluable query is left out of the logs.

    `data` and `model` are the library's words (`validation_data=` and
    `embedding_model=` are their deprecated names); the callback's `self.model` stays the
    model Keras trains, and `model=` is kept as `embedding_model`.

    Args:
        data: a `tf.data.Dataset`, `keras.utils.PyDataset` or
            iterable of `(x, y)` batches that ends (e.g.
            `keras_dml.data.evaluation_batches`; an infinite or unknown-length
            stream such as `class_balanced_batches` is refused unless `steps`
            bounds it), or an `(x, y)` tuple of arrays. (`validation_data=` is its
            deprecated name.)
        ks: the K of Recall@K. Defaults to (1, 2, 4, 8).
        metrics: subset of `keras_dml.evaluation.METRICS`. Defaults to all.
        gallery_data: the gallery searched, in the same form as
            `data`. Defaults to None (leave-one-out). `reference_data=`
            is its deprecated name.
        model: the model that maps x to embeddings. Defaults to None: the model
            being trained. (`embedding_model=` is its deprecated name.)
        every_n_epochs: evaluate after epochs n, 2n, ... Defaults to 1. Epochs
            in between carry no value (a `CSVLogger` fixes its columns at the
            first epoch, so keep 1 when logging to CSV).
        seen_classes: class ids of the training classes, to split the report.
            Defaults to None (no split).
        metric: "cosine", "dot" or "euclidean": the similarity of the search.
            Defaults to "cosine". (`distance=` is its deprecated name.)
        batch_size: batch size for array inputs. Defaults to 256.
        steps: batches taken from each dataset per evaluation. Defaults to None:
            all of it.
        chunk_size: queries per kNN chunk. Defaults to None (automatic).
        prefix: prefix of the log keys. Defaults to "val_".
        verbose: 1 prints one line per evaluation, 0 is silent. Defaults to 1.

    Attributes:
        history: `{"epoch": [0-based epochs evaluated], "val_recall@1": [...], ...}`,
            what `keras_dml.plots.recall_curves` draws.
        last_results: the latest `{log_key: value}`.

    Examples:
        >>> model.fit(  # doctest: +SKIP
        ...     train_ds, epochs=20,
        ...     callbacks=[
        ...         keras_dml.callbacks.RecallAtK((x_val, y_val), ks=(1, 2, 4, 8)),
        ...         keras.callbacks.ModelCheckpoint(
        ...             "best.keras", monitor="val_recall@1", mode="max",
        ...             save_best_only=True),
        ...     ])

    Reference:
        Recall@K as in Song et al., "Deep Metric Learning via Lifted Structured
        Feature Embedding", CVPR 2016; MAP@R and R-Precision as in Musgrave et
        al., "A Metric Learning Reality Check", ECCV 2020.
    """

    @hyperparameters.renamed_keywords(distance="metric", reference_data="gallery_data",
                                      validation_data="data", embedding_model="model")
    def __init__(
        self,
        data,
        ks=(1, 2, 4, 8),
        metrics=METRICS,
        gallery_data=None,
        model=None,
        every_n_epochs=1,
        seen_classes=None,
        metric="cosine",
        batch_size=256,
        chunk_size=None,
        prefix="val_",
        verbose=1,
        steps=None,
    ):
        super().__init__(model, every_n_epochs, prefix, batch_size, steps)
        self.validation_data = as_dataset(data, batch_size, steps, "data")
        self.gallery_data = (
            None if gallery_data is None
            else as_dataset(gallery_data, batch_size, steps, "gallery_data")
        )
        # checked now, not after the first epoch of training
        self.metrics, self.ks = check_metrics(metrics, ks)
        self.seen_classes = None if seen_classes is None else np.unique(np.asarray(seen_classes))
        self.metric = validation.check_search_metric(metric)
        self.chunk_size = None if chunk_size is None else hyperparameters.integer_at_least(
            "chunk_size", chunk_size, 1, strict=True)
        self.verbose = hyperparameters.one_of("verbose", verbose, (0, 1))
        self.last_results = {}
        self.history = {"epoch": []}

    def _metrics(self, embeddings, labels, references=None, reference_labels=None):
        result = retrieval_metrics(
            embeddings, labels, references, reference_labels, self.ks, self.metrics,
            self.metric, self.chunk_size,
        )
        return {key: value for key, value in result.items() if key not in _COUNTS}

    def _groups(self, embeddings, labels, references, reference_labels):
        """Seen / unseen classes, each evaluated among themselves."""
        groups = {}
        for name, seen in (("seen_", True), ("unseen_", False)):
            mask = np.isin(labels, self.seen_classes) == seen
            subset = [embeddings[mask], labels[mask], None, None]
            if references is not None:
                ref_mask = np.isin(reference_labels, self.seen_classes) == seen
                subset[2:] = references[ref_mask], reference_labels[ref_mask]
            if not len(subset[1]) or (references is not None and not len(subset[3])):
                continue
            try:
                groups[name] = self._metrics(*subset)
            except ValueError as error:  # e.g. no class with two samples in the group
                warnings.warn(f"RecallAtK: {name[:-1]} classes not evaluated: {error}")
        return groups

    def evaluate(self):
        """Embed the validation data now and return `{log_key: value}`."""
        if self._forward is None:
            raise ValueError("RecallAtK has no model: pass it to fit(callbacks=...) first.")
        embeddings, labels = embed_finite(self._forward, self.validation_data)
        self.check_collapse(embeddings)
        references = reference_labels = None
        if self.gallery_data is not None:
            references, reference_labels = embed_finite(self._forward, self.gallery_data)
        results = {"": self._metrics(embeddings, labels, references, reference_labels)}
        if self.seen_classes is not None:
            results.update(self._groups(embeddings, labels, references, reference_labels))
        return {
            f"{self.prefix}{group}{key}": value
            for group, values in results.items()
            for key, value in values.items()
        }

    def on_epoch_end(self, epoch, logs=None):
        if not self.due(epoch):
            return
        start = time.perf_counter()
        self.last_results = self.evaluate()
        self.history["epoch"].append(epoch)
        for key, value in self.last_results.items():
            self.history.setdefault(key, []).append(value)
        if logs is not None:
            logs.update(self.last_results)
        if self.verbose:
            shown = " - ".join(f"{key}: {value:.4f}" for key, value in self.last_results.items())
            print(f"Epoch {epoch + 1}: {shown} ({time.perf_counter() - start:.1f} s)")


class VerificationMetrics(_EmbeddingCallback):
    """ROC AUC, EER, TAR@FAR and the best-F1 threshold of validation pairs, per epoch.

    At the end of every `every_n_epochs`-th epoch the model embeds the
    validation data (inference mode), `pair_scores` scores all pairs (or
    `max_pairs` sampled ones) and `verification_metrics` enters the logs as
    `val_roc_auc`, `val_eer`, `val_tar@far=1e-3`, ..., `val_best_f1`,
    `val_best_f1_threshold`. List it before `CSVLogger`, `TensorBoard` or
    `ModelCheckpoint(monitor="val_roc_auc", mode="max")`.

    `data` and `model` are the library's words (`validation_data=` and
    `embedding_model=` are their deprecated names); the callback's `self.model` stays the
    model Keras trains, and `model=` is kept as `embedding_model`.

    Args:
        data: Batches of `(x, y)` that end (see `RecallAtK`), or an `(x, y)` tuple of
            arrays. (`validation_data=` is its deprecated name.)
        far_targets: FARs to log TAR at. Defaults to (1e-2, 1e-3, 1e-4).
        metric: `"cosine"` (default), `"dot"` or `"euclidean"`.
        max_pairs: Pairs scored at most (sampled beyond). Defaults to 1,000,000.
        model: The model mapping x to embeddings. Defaults to None: the model being
            trained. (`embedding_model=` is its deprecated name.)
        every_n_epochs: Evaluate after epochs n, 2n, ... Defaults to 1.
        batch_size: Batch size for array inputs. Defaults to 256.
        prefix: Prefix of the log keys. Defaults to "val_".
        steps: Batches taken from a dataset per evaluation. Defaults to None: all.

    Attributes:
        last_results: The latest `verification_metrics` dict (with the curves).
    """

    @hyperparameters.renamed_keywords(validation_data="data", embedding_model="model")
    def __init__(self, data, far_targets=FAR_TARGETS, metric="cosine",
                 max_pairs=1_000_000, model=None, every_n_epochs=1, batch_size=256,
                 prefix="val_", steps=None):
        super().__init__(model, every_n_epochs, prefix, batch_size, steps)
        self.far_targets = _far_targets(far_targets)
        self.metric = validation.check_search_metric(metric)
        self.max_pairs = hyperparameters.integer_at_least("max_pairs", max_pairs, 1, strict=True)
        self.validation_data = as_dataset(data, batch_size, steps, "data")
        self.last_results = None

    def evaluate(self):
        """Embeds the validation data; returns the `verification_metrics` dict."""
        embeddings, labels = embed_finite(self._forward, self.validation_data)
        self.check_collapse(embeddings)
        scores, same = pair_scores(embeddings, labels, self.metric, self.max_pairs)
        self.last_results = verification_metrics(scores, same, self.far_targets)
        return self.last_results

    def on_epoch_end(self, epoch, logs=None):
        if not self.due(epoch):
            return
        results = self.evaluate()
        keys = [k for k in results if k in _VERIFICATION_LOGGED or k.startswith("tar@far=")]
        if logs is not None:
            logs.update({self.prefix + key: results[key] for key in keys})


def _far_targets(far_targets):
    """`far_targets` as a tuple of floats in (0, 1], else a ValueError naming it."""
    try:
        targets = tuple(float(target) for target in far_targets)
    except (TypeError, ValueError):
        raise ValueError(f"far_targets must be a list of false accept rates in (0, 1], got "
                         f"{far_targets!r}.") from None
    if not targets or not all(0.0 < target <= 1.0 for target in targets):
        raise ValueError(f"far_targets must be a non-empty list of false accept rates in "
                         f"(0, 1], got {far_targets!r}.")
    return targets
