"""`VerificationMetrics`: verification metrics of validation pairs in the epoch logs.

A sibling of `keras_dml.callbacks.RecallAtK` for the "same or not?" view.
"""

import keras

from keras_dml import hyperparameters
from keras_dml.evaluation.embedding import embed_with, inference_function
from keras_dml.evaluation.verification import FAR_TARGETS, pair_scores, verification_metrics

LOGGED = ("roc_auc", "eer", "best_f1", "best_f1_threshold")


class VerificationMetrics(keras.callbacks.Callback):
    """ROC AUC, EER, TAR@FAR and the best-F1 threshold of validation pairs, per epoch.

    At the end of every `every_n_epochs`-th epoch the model embeds the
    validation data (inference mode), `pair_scores` scores all pairs (or
    `max_pairs` sampled ones) and `verification_metrics` enters the logs as
    `val_roc_auc`, `val_eer`, `val_tar@far=1e-3`, ..., `val_best_f1`,
    `val_best_f1_threshold`. List it before `CSVLogger`, `TensorBoard` or
    `ModelCheckpoint(monitor="val_roc_auc", mode="max")`.

    Args:
        validation_data: A `tf.data.Dataset` of `(x, y)` batches, or an `(x, y)`
            tuple of arrays.
        far_targets: FARs to log TAR at. Defaults to (1e-2, 1e-3, 1e-4).
        metric: `"cosine"` (default), `"dot"` or `"euclidean"`.
        max_pairs: Pairs scored at most (sampled beyond). Defaults to 1,000,000.
        embedding_model: The model mapping x to embeddings. Defaults to None:
            the model being trained.
        every_n_epochs: Evaluate after epochs n, 2n, ... Defaults to 1.
        batch_size: Batch size for array inputs. Defaults to 256.
        prefix: Prefix of the log keys. Defaults to "val_".

    Attributes:
        last_results: The latest `verification_metrics` dict (with the curves).
    """

    def __init__(self, validation_data, far_targets=FAR_TARGETS, metric="cosine",
                 max_pairs=1_000_000, embedding_model=None, every_n_epochs=1, batch_size=256,
                 prefix="val_"):
        super().__init__()
        every_n_epochs = hyperparameters.integer_at_least("every_n_epochs", every_n_epochs, 1,
                                                          strict=True)
        self.validation_data = validation_data
        self.far_targets = tuple(far_targets)
        self.metric = metric
        self.max_pairs = max_pairs
        self.embedding_model = embedding_model
        self.every_n_epochs = every_n_epochs
        self.batch_size = batch_size
        self.prefix = prefix
        self.last_results = None
        self._forward = None

    def set_model(self, model):
        super().set_model(model)
        self._forward = inference_function(self.embedding_model or model)

    def evaluate(self):
        """Embeds the validation data; returns the `verification_metrics` dict."""
        embeddings, labels = embed_with(self._forward, self.validation_data, self.batch_size)
        scores, same = pair_scores(embeddings, labels, self.metric, self.max_pairs)
        self.last_results = verification_metrics(scores, same, self.far_targets)
        return self.last_results

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs:
            return
        results = self.evaluate()
        keys = [k for k in results if k in LOGGED or k.startswith("tar@far=")]
        if logs is not None:
            logs.update({self.prefix + key: results[key] for key in keys})
