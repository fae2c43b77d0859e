"""A one-channel convolution as a sum of shifted products, for JAX's CPU step.

XLA:CPU computes a convolution with one input channel (the grayscale images entering
cnn3) in its general convolution kernel, which is slow at that shape: in the main job's
network (cnn3 of width 32, 28 x 28 x 1 images, batch 128) the first layer's forward
convolution took 5.1 ms, its bias add 3.0 ms and its weight gradient 2.3 ms of a
41.8 ms training step (2026-11-28, `benchmarks.profile_step`). Written as the sum over
the kernel's taps of (shifted input) x (that tap's weights), XLA fuses the forward pass
with the bias add and differentiates each tap as a small matrix product; the jitted
value and gradient of the network then took 33-35 ms instead of 39-44 ms. Inputs with
more channels are faster in XLA's kernel, and TensorFlow and PyTorch have fast
convolutions of their own: they take Keras' path.
"""

import keras

from keras_dml import backend


@keras.saving.register_keras_serializable(package="keras_dml")
class ShiftedConv2D(keras.layers.Conv2D):
    """`keras.layers.Conv2D` computed on JAX, for one input channel, as shifted products.

    The same layer: the same arguments, weights and outputs (up to float rounding). On
    JAX, with one input channel, channels-last inputs of known height and width,
    stride 1, no dilation, one group and "same" or "valid" padding, the output is
    sum over taps (i, j) of input[:, i:i + H, j:j + W] x kernel[i, j] (after the
    "same" padding). Every other case, and every other backend, takes Keras' path.

    Examples:

    >>> conv = keras_dml.convolution.ShiftedConv2D(2, 3, padding="same")
    >>> tuple(conv(np.ones((1, 5, 5, 1), "float32")).shape)
    (1, 5, 5, 2)
    """

    def _shifted(self, inputs):
        return (backend.name() == "jax" and self.data_format == "channels_last"
                and inputs.shape[-1] == 1 and None not in inputs.shape[1:3]
                and self.groups == 1 and set(self.strides) == {1}
                and set(self.dilation_rate) == {1} and self.padding in ("same", "valid"))

    def convolution_op(self, inputs, kernel):
        if not self._shifted(inputs):
            return super().convolution_op(inputs, kernel)
        rows, columns = self.kernel_size
        if self.padding == "same":  # as Keras pads at stride 1: the odd pixel after
            inputs = keras.ops.pad(inputs, [[0, 0], [(rows - 1) // 2, rows // 2],
                                            [(columns - 1) // 2, columns // 2], [0, 0]])
        height, width = inputs.shape[1] - rows + 1, inputs.shape[2] - columns + 1
        outputs = None
        for row in range(rows):
            for column in range(columns):
                tap = keras.ops.einsum(
                    "nhwc,cf->nhwf",
                    inputs[:, row:row + height, column:column + width], kernel[row, column])
                outputs = tap if outputs is None else outputs + tap
        return outputs
