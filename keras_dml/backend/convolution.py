"""A one-channel 2-D convolution (stride 1) from shifted copies of its input, by
backend, for `keras_dml.convolution.ShiftedConv2D`.

With taps t_ij = the (padded) input shifted by (i, j), the convolution is
sum_ij t_ij x kernel[i, j] and its weight gradient is, for an upstream gradient g,
d kernel[i, j] = sum over pixels of t_ij g: one matrix product of the taps, as columns
of an (N H W, kh kw) matrix, with g as an (N H W, F) matrix.
"""

import keras

from keras_dml import backend


def taps(inputs, rows, columns, padding):
    """The kernel's `rows` x `columns` shifted views of `inputs` (N, H, W, C), row-major,
    each the output's spatial size (stride 1, "same" padded as Keras pads: the odd pixel
    after)."""
    if padding == "same":
        inputs = keras.ops.pad(inputs, [[0, 0], [(rows - 1) // 2, rows // 2],
                                        [(columns - 1) // 2, columns // 2], [0, 0]])
    height, width = inputs.shape[1] - rows + 1, inputs.shape[2] - columns + 1
    return [inputs[:, row:row + height, column:column + width]
            for row in range(rows) for column in range(columns)]


def one_channel_convolution(inputs, kernel, padding):
    """`inputs` (N, H, W, 1) convolved with `kernel` (kh, kw, 1, F), stride 1, "same" or
    "valid" padding.

    JAX: the sum over taps of (tap x its weights), which XLA fuses with the bias add
    and differentiates tap by tap. TensorFlow: its own convolution forward, and the
    weight gradient as the one matrix product of the module docstring (oneDNN's
    weight-gradient kernel is slow for one input channel).
    """
    rows, columns = kernel.shape[:2]
    if backend.is_tensorflow():
        return _tensorflow(inputs, kernel, padding)
    outputs = None
    for tap, weights in zip(taps(inputs, rows, columns, padding),
                            keras.ops.reshape(kernel, (rows * columns, 1, -1))):
        term = keras.ops.einsum("nhwc,cf->nhwf", tap, weights)
        outputs = term if outputs is None else outputs + term
    return outputs


def _tensorflow(inputs, kernel, padding):
    tf = backend.require_tensorflow("The one-channel convolution on TensorFlow")
    rows, columns, _, filters = kernel.shape
    tf_padding = padding.upper()

    @tf.custom_gradient
    def convolve(x, w):
        def gradient(upstream):
            columns_matrix = tf.reshape(tf.concat(taps(x, rows, columns, padding), axis=-1),
                                        [-1, rows * columns])
            kernel_gradient = tf.matmul(columns_matrix, tf.reshape(upstream, [-1, filters]),
                                        transpose_a=True)
            input_gradient = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(x), filter=w, out_backprop=upstream,
                strides=[1, 1, 1, 1], padding=tf_padding)
            return input_gradient, tf.reshape(kernel_gradient, tf.shape(w))

        return tf.nn.conv2d(x, w, 1, tf_padding), gradient

    # the kernel read here, so that the custom gradient sees a tensor, not a variable
    return convolve(tf.convert_to_tensor(inputs), tf.convert_to_tensor(kernel))
