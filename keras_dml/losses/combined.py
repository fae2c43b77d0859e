"""`Combined`: a weighted sum of keras_dml losses on the same batch."""

import keras

from keras_dml import hyperparameters as _hyper

__all__ = ["Combined"]


class CombinedLayers(keras.layers.Layer):
    """The trainable layers of a combined loss's terms, and one `Mean` per term.

    `DMLModel` attaches it like any loss's `trainable_layer`, so every term's
    weights (proxies) are trained and saved, and the per-term metrics reach the
    progress bar and `History`.
    """

    def __init__(self, parts, term_names, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.parts = list(parts)
        self.terms = [keras.metrics.Mean(name=name) for name in term_names]

    def build(self, input_shape):
        for part in self.parts:
            if not part.built:
                part.build(input_shape)

    def call(self, inputs):
        return inputs


def _unique_names(names):
    seen, result = {}, []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        result.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return result


@keras.saving.register_keras_serializable(package="keras_dml")
class Combined(keras.losses.Loss):
    """A weighted sum of losses, each computed on the same (global) batch.

        L = sum_k w_k L_k(labels, embeddings)

    Each term is reduced by its own reduction (and `sample_weight`), so a
    batch-global loss (ProxyAnchor) and a per-anchor loss (MultiSimilarity) combine
    as their authors defined them. The terms' own weights (proxies) are tracked
    through `trainable_layer`, so `DMLModel` trains and saves them; each term's
    value is also a metric named after the loss ("multi_similarity",
    "proxy_anchor", ...) that the progress bar and `History` show next to the total
    "loss". `DMLModel.compile(loss=[a, b], loss_weights=[1.0, 0.5])` builds one.

    Args:
        losses: a list of keras_dml losses (instances, configs or registered names
            such as "keras_dml>MultiSimilarity").
        weights: one float per loss. Defaults to 1.0 each.

    Examples:

    >>> loss = keras_dml.losses.Combined(
    ...     [keras_dml.losses.MultiSimilarity(), keras_dml.losses.ProxyAnchor(100)],
    ...     weights=[1.0, 0.5])
    >>> model.compile(optimizer="adam", loss=loss)
    """

    def __init__(self, losses, weights=None, reduction="sum_over_batch_size", name="combined",
                 dtype=None):
        from keras_dml.losses import registry

        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if not isinstance(losses, (list, tuple)) or not losses:
            raise ValueError(f"Combined needs a non-empty list of losses, got {losses!r}.")
        self.losses = [registry.get(loss) if isinstance(loss, str)
                       else keras.saving.deserialize_keras_object(loss)
                       if isinstance(loss, dict) else loss for loss in losses]
        for loss in self.losses:
            if not isinstance(loss, keras.losses.Loss) or isinstance(loss, Combined):
                raise ValueError(f"Combined takes keras_dml losses (not nested Combined), "
                                 f"got {loss!r}.")
        weights = [1.0] * len(self.losses) if weights is None else weights
        if (isinstance(weights, (str, dict)) or not hasattr(weights, "__len__")
                or len(weights) != len(self.losses)):
            raise ValueError(f"Combined got {len(self.losses)} losses: give weights as one "
                             f"weight per loss, got weights={weights!r}.")
        self.weights = [_hyper.non_negative("loss weight", w) for w in weights]
        continuous = {bool(getattr(loss, "continuous_labels", False)) for loss in self.losses}
        if len(continuous) > 1:
            raise ValueError("Combined cannot mix losses on class labels with losses on "
                             "continuous labels (LogRatio): they read different y.")
        self.continuous_labels = continuous.pop()
        # a memory loss (CrossBatchMemory) is told whether to enqueue (training only)
        self.updates_state = any(getattr(loss, "updates_state", False) for loss in self.losses)
        parts = [loss.trainable_layer for loss in self.losses
                 if getattr(loss, "trainable_layer", None) is not None]
        self.trainable_layer = CombinedLayers(
            parts, _unique_names([loss.name for loss in self.losses]), name=f"{name}_terms")

    def __call__(self, y_true, y_pred, sample_weight=None, **state):
        """The weighted total (a scalar); each term is reduced by its own reduction.

        `state` (`enqueue=...` from `DMLModel`) goes to the terms that update state."""
        total = 0.0
        for loss, weight, metric in zip(self.losses, self.weights, self.trainable_layer.terms):
            extra = state if getattr(loss, "updates_state", False) else {}
            value = keras.ops.convert_to_tensor(loss(y_true, y_pred,
                                                     sample_weight=sample_weight, **extra))
            if len(value.shape):
                raise ValueError(f"Combined needs reduced terms; {loss.name} has reduction "
                                 f"{loss.reduction!r}.")
            metric.update_state(value)
            total = total + weight * value
        return total

    def call(self, y_true, y_pred):
        return self(y_true, y_pred)

    def get_config(self):
        config = super().get_config()
        config.update(losses=[keras.saving.serialize_keras_object(loss) for loss in self.losses],
                      weights=list(self.weights))
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
