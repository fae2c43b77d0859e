"""`ShiftedConv2D`: a one-channel convolution from shifted copies of its input, for
JAX's and TensorFlow's CPU steps, and PyTorch's convolution on a view of channels-last
inputs.

A convolution with one input channel (the grayscale images entering cnn3) is slow in
both backends' general kernels at that shape. Written as the sum over the kernel's
taps of (shifted input) x (that tap's weights), XLA fuses the forward pass with the
bias add on JAX; on TensorFlow (oneDNN) the weight gradient becomes one matrix product
of the taps with the upstream gradient. The arithmetic is in
`keras_dml.backend.layers.one_channel_convolution`. Inputs with more channels are
faster in the backends' kernels. On PyTorch a channels-last convolution with "valid"
padding, or "same" padding at stride 1 with odd kernel sizes, runs PyTorch's kernel on
a channels-first view of the input, the bias added by the kernel
(`keras_dml.backend.torch.layers.conv_channels_last`), where Keras' path copies the
input twice and adds the bias in a pass of its own.
"""

import keras

from keras_dml import backend
from keras_dml.backend.layers import one_channel_convolution

__all__ = ["ShiftedConv2D"]


@keras.saving.register_keras_serializable(package="keras_dml")
class ShiftedConv2D(keras.layers.Conv2D):
    """`keras.layers.Conv2D` computed from shifted copies of a one-channel input.

    The same layer: the same arguments, weights, outputs and gradients (up to float
    rounding). On JAX and TensorFlow, with one input channel, channels-last inputs of
    known height and width, stride 1, no dilation, one group and "same" or "valid"
    padding, the convolution is computed from the taps input[:, i:i + H, j:j + W]
    (after the "same" padding): on JAX the output is the sum over taps of
    tap x kernel[i, j]; on TensorFlow the weight gradient is one matrix product of the
    taps with the upstream gradient. On PyTorch, with channels-last inputs and "valid"
    padding, or "same" padding at stride 1 that pads both sides alike (odd kernel
    sizes), PyTorch's convolution runs on a channels-first view of the inputs (no copy)
    and adds the bias itself. Every other case takes Keras' path.

    Examples:

    >>> conv = keras_dml.layers.ShiftedConv2D(2, 3, padding="same")
    >>> tuple(conv(np.ones((1, 5, 5, 1), "float32")).shape)
    (1, 5, 5, 2)
    """

    def _shifted(self, inputs):
        return (backend.name() in ("jax", "tensorflow") and self.data_format == "channels_last"
                and inputs.shape[-1] == 1 and None not in inputs.shape[1:3]
                and self.groups == 1 and set(self.strides) == {1}
                and set(self.dilation_rate) == {1} and self.padding in ("same", "valid"))

    def _channels_last_view(self):
        """PyTorch, channels-last, and padding PyTorch's kernel does without a padded copy:
        "valid", or "same" at stride 1 with an even span `dilation x (kernel - 1)`."""
        if backend.name() != "torch" or self.data_format != "channels_last":
            return False
        from keras_dml.backend.torch.layers import torch_pads_like_keras

        return torch_pads_like_keras(self.kernel_size, self.strides, self.dilation_rate,
                                     self.padding)

    def call(self, inputs):
        if not self._channels_last_view():
            return super().call(inputs)
        from keras_dml.backend.torch import layers as torch_layers

        outputs = torch_layers.conv_channels_last(
            keras.ops.convert_to_tensor(inputs), keras.ops.convert_to_tensor(self.kernel),
            keras.ops.convert_to_tensor(self.bias) if self.use_bias else None,
            self.strides, self.padding, self.dilation_rate, self.groups)
        return outputs if self.activation is None else self.activation(outputs)

    def convolution_op(self, inputs, kernel):
        if not self._shifted(inputs):
            return super().convolution_op(inputs, kernel)
        return one_channel_convolution(inputs, kernel, self.padding)
