"""Losses written as a user would, outside keras_dml (registered in package "Custom"):
the subjects of tests/test_losses_user.py and of `keras_dml.testing.check_loss`.

A module of its own, so that a fresh process can import it to load a saved model.
"""

import keras

from keras_dml import hyperparameters
from keras_dml.losses import PairLoss, register


def _contrastive_value(matrix, pairs, pos_margin, neg_margin):
    positive = keras.ops.cast(pairs.positive, "float32")
    negative = keras.ops.cast(pairs.negative, "float32")
    return keras.ops.sum(keras.ops.relu(pos_margin - matrix) * positive
                         + keras.ops.relu(matrix - neg_margin) * negative, axis=1)


@register(example={"neg_margin": 0.3})
class ValueContrastive(PairLoss):
    """keras_dml's cosine Contrastive written as its value only (W by autodiff)."""

    config_keys = PairLoss.config_keys + ("pos_margin", "neg_margin")

    def __init__(self, pos_margin=1.0, neg_margin=0.5, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="value_contrastive", dtype=None):
        super().__init__(metric=metric, miner=miner, reduction=reduction, name=name,
                         dtype=dtype)
        self.pos_margin = hyperparameters.finite("pos_margin", pos_margin)
        self.neg_margin = hyperparameters.finite("neg_margin", neg_margin)

    def compute_value(self, matrix, pairs):
        return _contrastive_value(matrix, pairs, self.pos_margin, self.neg_margin)


@register(row_local=False)
class MeanOverPairs(PairLoss):
    """A batch-global value: the mean over negative pairs of [S - 0.2]_+ (W by autodiff)."""

    def compute_value(self, matrix, pairs):
        negative = keras.ops.cast(pairs.negative, "float32")
        active = keras.ops.relu(matrix - 0.2) * negative
        return keras.ops.sum(active) / keras.ops.maximum(keras.ops.sum(negative), 1.0)


@register()
class OffByAFactor(PairLoss):
    """Contrastive whose stated W is 1.5 times the derivative of its value."""

    def compute_terms(self, matrix, pairs):
        value = _contrastive_value(matrix, pairs, 1.0, 0.5)
        pull = keras.ops.cast((matrix < 1.0) & pairs.positive, "float32")
        push = keras.ops.cast((matrix > 0.5) & pairs.negative, "float32")
        return value, 1.5 * (push - pull)


@register(example={"margin": 0.9})
class ForgetfulMargin(ValueContrastive):
    """A hyperparameter in config_keys whose own get_config drops it again."""

    config_keys = PairLoss.config_keys + ("margin",)

    def __init__(self, margin=0.5, *, metric="cosine", miner=None,
                 reduction="sum_over_batch_size", name="forgetful_margin", dtype=None):
        super().__init__(neg_margin=margin, metric=metric, miner=miner, reduction=reduction,
                         name=name, dtype=dtype)
        self.margin = margin

    def get_config(self):
        config = super().get_config()
        del config["margin"]
        return config
