"""TensorFlow's fused batch-normalisation kernel (`FusedBatchNormV3`), for
`keras_dml.batch_norm.FusedBatchNormalization` on the TensorFlow backend."""

from keras_dml import backend


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """NHWC float32 batch normalisation in one kernel.

    Training (`mean` and `variance` None): returns (y, batch mean, batch variance with
    the n / (n - 1) correction the kernel applies). Inference: returns y, normalised
    with the given moving `mean` and `variance`.
    """
    tf = backend.require_tensorflow("The fused batch-normalisation kernel")
    training = mean is None
    outputs = tf.raw_ops.FusedBatchNormV3(
        x=x, scale=gamma, offset=beta,
        mean=tf.zeros([0]) if training else mean,
        variance=tf.zeros([0]) if training else variance,
        epsilon=epsilon, data_format="NHWC", is_training=training)
    return outputs[:3] if training else outputs[0]
