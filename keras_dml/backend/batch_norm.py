"""Batch normalisation of channels-last images in one pass each way, by backend, for
`keras_dml.batch_norm.FusedBatchNormalization`.

TensorFlow: its fused kernel `FusedBatchNormV3` (oneDNN on x86 CPUs). JAX: a
`jax.custom_vjp` whose backward pass is the closed-form batch-norm gradient (two
per-channel sums and one elementwise pass, `keras_dml.backend.layers_jax`). PyTorch:
its native `batch_norm` on a channels-first view of the channels-last batch (no copy,
`keras_dml.backend.layers_torch`).
"""

from keras_dml import backend


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """Float32 batch normalisation of `x` (N, H, W, C) over all but its last axis.

    Training (`mean` and `variance` None): returns (y, batch mean, batch variance), the
    variance biased (divided by N x H x W, as Keras' moving statistics take it).
    Inference: returns y, normalised with the given moving `mean` and `variance`.
    """
    if backend.is_tensorflow():
        return _tensorflow(x, gamma, beta, epsilon, mean, variance)
    if backend.name() == "jax":
        from keras_dml.backend import layers_jax

        if mean is None:
            return layers_jax.normalise_batch(x, gamma, beta, epsilon)
        return layers_jax.normalise(x, gamma, beta, epsilon, mean, variance)
    if backend.name() == "torch":
        from keras_dml.backend import layers_torch

        return layers_torch.batch_norm_channels_last(x, gamma, beta, epsilon, mean, variance)
    raise ValueError(f"No fused batch normalisation on the {backend.name()} backend.")


def _tensorflow(x, gamma, beta, epsilon, mean, variance):
    tf = backend.require_tensorflow("The fused batch-normalisation kernel")
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

