"""PyTorch's kernels for `keras_dml.backend.layers` and `TiledMaxPooling2D`: max pooling
and batch normalisation on channels-first views of channels-last batches.

Keras' PyTorch backend copies a channels-last batch into channels-first memory before
`max_pool2d` (and hands on a permuted, non-contiguous result). PyTorch pools a
channels-first view of channels-last memory with its channels-last kernel, without
either copy. Its native batch norm reads such a view the same way, in two passes
(Keras' PyTorch path takes E[x^2] - E[x]^2).
"""

import torch
import torch.nn.functional as F

__all__ = ["fused_batch_norm", "max_pool_channels_last"]


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
