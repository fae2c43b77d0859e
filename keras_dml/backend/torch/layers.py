"""PyTorch's kernels for `keras_dml.backend.layers`, `TiledMaxPooling2D` and
`ShiftedConv2D`: convolution, max pooling and batch normalisation on channels-first
views of channels-last batches.

Keras' PyTorch backend copies a channels-last batch into channels-first memory before
`max_pool2d` (and hands on a permuted, non-contiguous result), and before `conv2d`
copies it twice (to channels-first, then to PyTorch's channels-last memory format)
and adds the bias in a pass of its own. PyTorch pools and convolves a channels-first
view of channels-last memory with its channels-last kernels, without these copies,
the bias added by the convolution. Its native batch norm reads such a view the same
way, in two passes (Keras' PyTorch path takes E[x^2] - E[x]^2).
"""

import torch
import torch.nn.functional as F

__all__ = ["conv_channels_last", "fused_batch_norm", "max_pool_channels_last",
           "torch_pads_like_keras"]


def torch_pads_like_keras(kernel_size, strides, dilation_rate, padding):
    """Whether `conv_channels_last` computes Keras' convolution for this padding without
    a padded copy: "valid", or "same" at stride 1 with an even span
    `dilation x (kernel - 1)` (PyTorch's "same" then pads both sides alike)."""
    spans = [d * (k - 1) for k, d in zip(kernel_size, dilation_rate)]
    return padding == "valid" or (padding == "same" and set(strides) == {1}
                                  and all(s % 2 == 0 for s in spans))


def conv_channels_last(inputs, kernel, bias, strides, padding, dilation_rate, groups=1):
    """`inputs` (N, H, W, C) convolved with a Keras `kernel` (kh, kw, C / groups, F) and
    `bias` (F,) or None: the values of Keras' `conv` plus the bias, for "valid" padding or
    "same" padding at stride 1 (PyTorch pads "same" as Keras: the odd pixel after)."""
    outputs = F.conv2d(inputs.permute(0, 3, 1, 2), kernel.permute(3, 2, 0, 1), bias,
                       stride=tuple(strides), padding=padding,
                       dilation=tuple(dilation_rate), groups=groups)
    return outputs.permute(0, 2, 3, 1)


def max_pool_channels_last(inputs, pool_size, strides):
    """`inputs` (N, H, W, C) max-pooled with "valid" padding: the same values, and the
    gradient to the same (first) maximum of each window, as Keras' `max_pool`."""
    pooled = F.max_pool2d(inputs.permute(0, 3, 1, 2), kernel_size=tuple(pool_size),
                          stride=tuple(strides))
    return pooled.permute(0, 2, 3, 1)


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """`keras_dml.backend.layers.fused_batch_norm` on PyTorch: training (`mean` and
    `variance` None) returns (y, batch mean, biased batch variance), inference y."""
    channels_first = x.permute(0, 3, 1, 2)  # a view: PyTorch reads channels-last memory
    if mean is not None:
        return F.batch_norm(channels_first, mean, variance, gamma, beta, training=False,
                            eps=epsilon).permute(0, 2, 3, 1)
    # momentum 1: the "running" buffers receive the batch's mean and unbiased variance
    with torch.no_grad():
        batch_mean, unbiased = torch.zeros_like(gamma), torch.ones_like(gamma)
    y = F.batch_norm(channels_first, batch_mean, unbiased, gamma, beta, training=True,
                     momentum=1.0, eps=epsilon)
    count = x.numel() // x.shape[-1]
    return y.permute(0, 2, 3, 1), batch_mean, unbiased * ((count - 1) / count)
