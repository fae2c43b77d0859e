"""Margin loss with a learnable boundary beta (Wu et al. 2017, "Sampling Matters")."""

import keras
import numpy as np

from keras_dml import ops, validation
from keras_dml import hyperparameters as _hyper
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss
from keras_dml.losses.registry import register

__all__ = ["Margin", "MarginBeta"]

_AVERAGES = ("pairs", "active")


@keras.saving.register_keras_serializable(package="keras_dml")
class MarginBeta(keras.layers.Layer):
    """The learnable boundary beta of `Margin`: one global value or one per class.

    Called on integer labels (N,), it returns beta_i for every anchor: the global
    beta, or beta[y_i] with `num_classes`.

    Args:
        num_classes: None for one global beta, else the number of classes (labels
            must lie in [0, num_classes)). Defaults to None.
        initial_value: Defaults to 1.2 (Wu et al.).
    """

    def __init__(self, num_classes=None, initial_value=1.2, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.num_classes = (
            None if num_classes is None
            else _hyper.integer_at_least("num_classes", num_classes, 1)
        )
        self.initial_value = _hyper.positive("beta", initial_value)

    def build(self, input_shape=None):
        self.beta = self.add_weight(
            shape=(self.num_classes or 1,), name="beta", dtype="float32",
            initializer=keras.initializers.Constant(self.initial_value),
        )

    def call(self, labels):
        beta = keras.ops.convert_to_tensor(self.beta)
        if self.num_classes is None:
            return keras.ops.broadcast_to(beta[:1], keras.ops.shape(labels))
        labels = validation.check_label_range(
            labels, self.num_classes,
            name=f"labels (Margin has one beta per class, num_classes={self.num_classes})")
        # XLA drops the run-time check: clip so the gather itself stays in bounds.
        return primitives.gather(beta, keras.ops.clip(labels, 0, self.num_classes - 1))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "initial_value": self.initial_value}


def _sphere_distance(similarity):
    """d = sqrt(2 - 2 S) and dd/dS = -1/d; both 0 where the points coincide."""
    distance = ops.safe_sqrt(2.0 - 2.0 * similarity)
    slope = keras.ops.where(distance > 0, -1.0 / keras.ops.where(distance > 0, distance, 1.0),
                            0.0)
    return distance, slope


def margin_terms(similarity, positive, negative, anchor_beta, alpha, nu, average):
    """Per-anchor margin loss value and its exact derivatives w.r.t. S and beta_a.

    With D = sqrt(2 - 2 S) and c the number of averaged pairs (all kept pairs for
    average="pairs", those with a non-zero loss for "active"):

        value_a = N/c sum_j [pos (D_aj - beta_a + alpha)_+ + neg (alpha + beta_a - D_aj)_+
                             + nu beta_a (pos + neg)]

    so that the mean over the N anchors is the batch loss. Returns (value (N,),
    d value_a / d S_a: (N, M), d value_a / d beta_a: (N,)).
    """
    positive_f = keras.ops.cast(positive, "float32")
    negative_f = keras.ops.cast(negative, "float32")
    distance, slope = _sphere_distance(similarity)
    beta = keras.ops.expand_dims(anchor_beta, 1)
    pull = keras.ops.relu(distance - beta + alpha) * positive_f
    push = keras.ops.relu(alpha + beta - distance) * negative_f
    pull_active = keras.ops.cast(pull > 0, "float32")
    push_active = keras.ops.cast(push > 0, "float32")
    counted = positive_f + negative_f if average == "pairs" else pull_active + push_active
    rows = keras.ops.cast(keras.ops.shape(similarity)[0], "float32")
    scale = keras.ops.divide_no_nan(rows, keras.ops.sum(counted))
    kept = keras.ops.sum(positive_f + negative_f, axis=1)
    value = scale * (keras.ops.sum(pull + push, axis=1) + nu * anchor_beta * kept)
    weights = scale * (pull_active - push_active) * slope
    beta_gradient = scale * (keras.ops.sum(push_active - pull_active, axis=1) + nu * kept)
    return value, weights, beta_gradient


@register(row_local=False)
class Margin(PairLoss):
    """Margin loss (Wu et al. 2017), weighted contrastive paper eq. 3.

    On L2-normalised embeddings (normalised inside), with D_ij = ||f_i - f_j||
    = sqrt(2 - 2 S_ij), a margin alpha and the boundary beta_i between positive and
    negative distances:

        L = 1/|P| sum_{(i,j) in P} [ Y_ij (D_ij - beta_i + alpha)_+
                                    + (1 - Y_ij)(alpha + beta_i - D_ij)_+ + nu beta_i ]

    P the kept ordered pairs (all pairs i != j, or those a miner keeps: the paper's
    setup is `Margin(miner=DistanceWeighted())`, all positives and one distance
    weighted negative per positive pair). nu beta_i is Wu et al.'s penalty that
    pushes beta down (nu = 0 disables it). beta is learnable, one global value or
    one per class (beta_i = beta[y_i]): a weight of `loss.trainable_layer` (a
    `MarginBeta`), which `keras_dml.models.DMLModel` attaches at compile time, so it
    is trained and saved with the model; a custom training loop optimises
    `loss.trainable_layer.trainable_weights` too.

    Pair weights (on cosine similarities) are the exact derivatives:
    dL/dS_ij = -+ 1/(|P| D_ij) for active positive / negative pairs, 0 otherwise.
    The gradient w.r.t. beta_i is (number of active negatives - active positives
    + nu * pairs of anchor i) / |P|.

    Args:
        alpha: the margin. Defaults to 0.2 (Wu et al.).
        beta: initial (or fixed) boundary. Defaults to 1.2 (Wu et al.).
        learn_beta: train beta. Defaults to True.
        num_classes: None for one global beta, else one beta per class (labels in
            [0, num_classes)). Defaults to None.
        nu: weight of Wu et al.'s optional beta penalty. Defaults to 0.0 (off, as in
            pytorch-metric-learning).
        average: "pairs" divides by |P| (eq. 3); "active" divides by the number of
            pairs with a non-zero loss (Wu et al.'s code and pytorch-metric-learning).
            Defaults to "pairs".
        miner: a `keras_dml.mining.Miner`, e.g. `DistanceWeighted()`. Defaults to None.

    Examples:

    >>> loss = keras_dml.losses.Margin(miner=keras_dml.mining.DistanceWeighted(seed=0))
    >>> model = keras_dml.models.DMLModel(inputs, embeddings)  # doctest: +SKIP
    >>> model.compile(optimizer="adam", loss=loss)   # beta is in model.trainable_weights

    Reference:
        Wu, Manmatha, Smola, Kraehenbuehl, "Sampling Matters in Deep Embedding
        Learning", ICCV 2017; weighted contrastive paper eq. 3.
    """

    metrics = ("cosine",)
    config_keys = ("miner", "alpha", "beta", "learn_beta", "num_classes", "nu", "average")

    def __init__(self, alpha=0.2, beta=1.2, learn_beta=True, num_classes=None, nu=0.0,
                 average="pairs", *, miner=None, reduction="sum_over_batch_size", name="margin",
                 dtype=None):
        super().__init__(miner=miner, reduction=reduction, name=name, dtype=dtype)
        self.alpha = _hyper.non_negative("alpha", alpha)
        self.nu = _hyper.non_negative("nu", nu)
        self.average = _hyper.one_of("average", average, _AVERAGES)
        self.learn_beta = _hyper.boolean("learn_beta", learn_beta)
        beta_layer = MarginBeta(num_classes, beta, name=f"{name}_beta")
        self.beta, self.num_classes = beta_layer.initial_value, beta_layer.num_classes
        self._beta_layer = beta_layer
        self.trainable_layer = beta_layer if self.learn_beta else None

    # -- beta: the one differentiable input besides the matrix ----------------------------
    def _built_beta_layer(self):
        if not self._beta_layer.built:
            self._beta_layer.build()
        return self._beta_layer

    def parameters(self, pairs):
        """beta_i of every anchor: the layer's current weights (built on first use)."""
        beta = self._built_beta_layer()(pairs.labels)
        return (beta if self.learn_beta else keras.ops.stop_gradient(beta),)

    def compute_terms(self, matrix, pairs, anchor_beta):
        value, weights, beta_gradient = margin_terms(
            matrix, pairs.positive, pairs.negative, anchor_beta, self.alpha, self.nu,
            self.average)
        return value, weights, (beta_gradient,)

    @property
    def beta_values(self):
        """Current beta values as a NumPy array ((1,) or (num_classes,))."""
        return np.asarray(self._built_beta_layer().beta)
