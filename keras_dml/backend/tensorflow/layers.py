"""TensorFlow's kernels for `keras_dml.backend.layers`: the fused batch norm and the
one-channel convolution's weight gradient."""

import tensorflow as tf

from keras_dml.backend.primitives import taps

__all__ = ["fused_batch_norm", "one_channel_convolution"]


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """`keras_dml.backend.layers.fused_batch_norm` by `FusedBatchNormV3` (oneDNN on x86
    CPUs)."""
    training = mean is None
    outputs = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta,
        mean=tf.zeros([0]) if training else mean,
        variance=tf.zeros([0]) if training else variance,
        epsilon=epsilon, data_format="NHWC", is_training=training)
    if not training:
        return outputs[0]
    y, batch_mean, unbiased = outputs[:3]
    count = tf.cast(tf.size(x) // tf.shape(x)[-1], tf.float32)
    return y, batch_mean, unbiased * (count - 1.0) / count  # the kernel returns n / (n - 1) x


def one_channel_convolution(inputs, kernel, padding):
    """`keras_dml.backend.layers.one_channel_convolution`: TensorFlow's forward
    convolution, and the weight gradient d kernel[i, j] = sum over pixels of t_ij g as
    one matrix product of the taps, as columns of an (N H W, kh kw) matrix, with the
    upstream gradient g as an (N H W, F) matrix (oneDNN's weight-gradient kernel is slow
    for one input channel)."""
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
