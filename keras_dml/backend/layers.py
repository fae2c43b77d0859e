"""The kernels of `keras_dml.layers`' faster layers, by backend.

`fused_batch_norm` (for `FusedBatchNormalization`) normalises channels-last images in one
pass each way: TensorFlow's fused kernel, a closed-form VJP on JAX, PyTorch's native
batch norm on a channels-first view. `one_channel_convolution` (for `ShiftedConv2D`)
convolves a one-channel input from its shifted copies. Each backend's code is in
`keras_dml.backend.<backend>.layers`.
"""

import importlib

import keras

from keras_dml import backend
from keras_dml.backend.primitives import taps

__all__ = ["fused_batch_norm", "one_channel_convolution"]


def _kernels():
    """`keras_dml.backend.<running backend>.layers`."""
    return importlib.import_module(f"keras_dml.backend.{backend.name()}.layers")


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """Float32 batch normalisation of `x` (N, H, W, C) over all but its last axis.

    Training (`mean` and `variance` None): returns (y, batch mean, batch variance), the
    variance biased (divided by N x H x W, as Keras' moving statistics take it).
    Inference: returns y, normalised with the given moving `mean` and `variance`.

    Raises:
        ValueError: on a backend without a fused form.
    """
    if backend.name() not in ("tensorflow", "jax", "torch"):
        raise ValueError(f"No fused batch normalisation on the {backend.name()} backend.")
    return _kernels().fused_batch_norm(x, gamma, beta, epsilon, mean, variance)


def one_channel_convolution(inputs, kernel, padding):
    """`inputs` (N, H, W, 1) convolved with `kernel` (kh, kw, 1, F), stride 1, "same" or
    "valid" padding.

    With taps t_ij = the (padded) input shifted by (i, j), the convolution is
    sum_ij t_ij x kernel[i, j]. Here (JAX) that sum, which XLA fuses with the bias add
    and differentiates tap by tap; TensorFlow keeps its own forward convolution and
    computes the weight gradient as one matrix product of the taps with the upstream
    gradient (`keras_dml.backend.tensorflow.layers`).
    """
    if backend.is_tensorflow():
        return _kernels().one_channel_convolution(inputs, kernel, padding)
    rows, columns = kernel.shape[:2]
    outputs = None
    for tap, weights in zip(taps(inputs, rows, columns, padding),
                            keras.ops.reshape(kernel, (rows * columns, 1, -1))):
        term = keras.ops.einsum("nhwc,cf->nhwf", tap, weights)
        outputs = term if outputs is None else outputs + term
    return outputs
