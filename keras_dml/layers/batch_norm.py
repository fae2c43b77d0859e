"""Batch normalisation in one pass each way, on every backend, and frozen batch norm
for fine-tuning.

Keras 3 normalises a batch with separate moment, subtract, scale and shift ops
(`tf.nn.moments` and `tf.nn.batch_normalization`); on a CPU their forward and
backward passes cost more than the convolutions of a small CNN. TensorFlow's
fused kernel (`FusedBatchNormV3`, oneDNN on x86 CPUs) computes the same function in
one op each way; on JAX a custom VJP with the closed-form gradient does, and on
PyTorch its native batch norm (`keras_dml.backend.layers.fused_batch_norm`).
"""

import keras

from keras_dml import backend
from keras_dml.backend import cpu
from keras_dml.backend.layers import fused_batch_norm

__all__ = ["FusedBatchNormalization", "freeze_batch_norm"]


@keras.saving.register_keras_serializable(package="keras_dml")
class FusedBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` computed in one pass each way.

    The same layer: the same arguments, weights, moving-statistics update
    (`moving = momentum * moving + (1 - momentum) * batch`, with the batch's
    biased variance) and outputs up to float rounding. The fused path runs on 4-D
    inputs normalised over their last axis (channels-last images) without a mask,
    renorm or synchronisation, on TensorFlow (its fused kernel), JAX (a custom VJP)
    and PyTorch (its native kernel, given more than one value per channel);
    everything else takes Keras' own path.
    """

    def _fusable(self, inputs, mask):
        axis = self.axis if isinstance(self.axis, int) else None
        if not (len(inputs.shape) == 4 and axis in (-1, 3) and mask is None
                and not self.renorm and not self.synchronized):
            return False
        if backend.name() == "torch":  # it refuses one value per channel (Keras: variance 0)
            values = inputs.shape[:3]
            return None not in values and values[0] * values[1] * values[2] > 1
        if backend.name() == "tensorflow":  # oneDNN's fused kernel is slow on AVX2
            return cpu.tensorflow_batch_norm() == "fused"
        return backend.name() == "jax"

    def call(self, inputs, training=None, mask=None):
        if not self._fusable(inputs, mask):
            return super().call(inputs, training=training, mask=mask)
        x = keras.ops.cast(inputs, "float32")
        channels = x.shape[-1]
        gamma = (keras.ops.cast(self.gamma, "float32") if self.scale
                 else keras.ops.ones([channels]))
        beta = keras.ops.cast(self.beta, "float32") if self.center else keras.ops.zeros([channels])
        if training and self.trainable:
            y, mean, variance = fused_batch_norm(x, gamma, beta, self.epsilon)
            self.moving_mean.assign(self.moving_mean * self.momentum
                                    + mean * (1.0 - self.momentum))
            self.moving_variance.assign(self.moving_variance * self.momentum
                                        + variance * (1.0 - self.momentum))
        else:
            y = fused_batch_norm(x, gamma, beta, self.epsilon,
                                 mean=keras.ops.cast(self.moving_mean, "float32"),
                                 variance=keras.ops.cast(self.moving_variance, "float32"))
        return keras.ops.cast(y, self.compute_dtype)


def _layers(model):
    """Every layer of `model`, nested models' layers included."""
    for layer in model.layers:
        yield layer
        if hasattr(layer, "layers"):
            yield from _layers(layer)


def freeze_batch_norm(model):
    """Freezes every `BatchNormalization` of `model` (nested models included).

    A frozen layer (`trainable=False`) normalises with its moving statistics, in
    training too, and neither the statistics nor gamma / beta change: Keras 3's
    rule, and what the Proxy Anchor code does (`m.eval()`, weight and bias without
    gradient). The papers fine-tune a pretrained backbone so (Proxy Anchor's
    `bn_freeze`). Call it before `compile`.

    Args:
        model: a `keras.Model`, e.g. a backbone from `keras_dml.backbones.get`.

    Returns:
        The number of layers frozen.
    """
    frozen = 0
    for layer in _layers(model):
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.trainable = False
            frozen += 1
    return frozen
