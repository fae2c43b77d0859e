"""JAX's kernels for `keras_dml.backend.layers` and `TiledMaxPooling2D`: the batch
normalisation's and the max pooling's gradients, written out.

XLA:CPU fuses these closed forms into fewer passes over the feature maps than JAX's
autodiff of the op-by-op forms.

Batch normalisation over all but the last axis: with m and v the batch's per-channel
mean and biased variance, s = gamma / sqrt(v + eps) and x_hat = (x - m) / sqrt(v + eps),
the forward pass is y = s x + (beta - s m), and for an upstream gradient g (n values per
channel, sums over them):

    d_beta = sum(g),  d_gamma = sum(g x_hat),
    d_x = s (g - sum(g) / n - x_hat sum(g x_hat) / n)

plus the terms from the returned mean and variance themselves (d_m / n and
2 d_v (x - m) / n), so the function stays exactly differentiable in all three outputs.
"""

import functools

import jax
import jax.numpy as jnp

__all__ = ["fused_batch_norm", "max_over_tiles", "normalise", "normalise_batch"]


def _axes(x):
    return tuple(range(x.ndim - 1))


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def normalise_batch(x, gamma, beta, epsilon):
    """(y, mean, biased variance) of `x` normalised with its own statistics."""
    return _forward(x, gamma, beta, epsilon)[0]


def _forward(x, gamma, beta, epsilon):
    axes = _axes(x)
    mean = jnp.mean(x, axis=axes)
    centred = x - mean
    variance = jnp.mean(jnp.square(centred), axis=axes)  # two passes: no cancellation
    inverse = jax.lax.rsqrt(variance + epsilon)
    scale = gamma * inverse
    y = x * scale + (beta - mean * scale)
    return (y, mean, variance), (x, mean, inverse, scale)


def _backward(epsilon, residuals, cotangents):
    x, mean, inverse, scale = residuals
    g, g_mean, g_variance = cotangents
    axes, count = _axes(x), x.size // x.shape[-1]
    centred = x - mean
    sum_g = jnp.sum(g, axis=axes)
    sum_g_x_hat = jnp.sum(g * centred, axis=axes) * inverse
    g_x = (scale * (g - sum_g / count - centred * (inverse * sum_g_x_hat / count))
           + g_mean / count + centred * (2.0 * g_variance / count))
    return g_x, sum_g_x_hat, sum_g


normalise_batch.defvjp(_forward, _backward)


def fused_batch_norm(x, gamma, beta, epsilon, mean=None, variance=None):
    """`keras_dml.backend.layers.fused_batch_norm` on JAX: training (`mean` and
    `variance` None) returns (y, batch mean, biased batch variance), inference y."""
    if mean is None:
        return normalise_batch(x, gamma, beta, epsilon)
    return normalise(x, gamma, beta, epsilon, mean, variance)


def normalise(x, gamma, beta, epsilon, mean, variance):
    """`x` normalised with given statistics (inference; plain autodiff)."""
    scale = gamma * jax.lax.rsqrt(variance + epsilon)
    return x * scale + (beta - mean * scale)


@functools.partial(jax.custom_vjp, nondiff_argnums=(1, 2))
def max_over_tiles(x, rows, columns):
    """The maximum of each `rows` x `columns` tile of `x` (N, H, W, C), H and W whole
    multiples of the tile. Its gradient goes to the first maximum of each tile in
    row-major order, as XLA's and TensorFlow's max-pooling gradients do."""
    return _max_forward(x, rows, columns)[0]


def _tiles(x, rows, columns):
    n, height, width, channels = x.shape
    return x.reshape(n, height // rows, rows, width // columns, columns, channels)


def _max_forward(x, rows, columns):
    y = jnp.max(_tiles(x, rows, columns), axis=(2, 4))
    return y, (x, y)


def _max_backward(rows, columns, residuals, g):
    x, y = residuals
    tiles, taken, tile_rows = _tiles(x, rows, columns), None, []
    for row in range(rows):
        tile_row = []
        for column in range(columns):
            hit = tiles[:, :, row, :, column, :] == y
            first = hit if taken is None else hit & ~taken
            taken = hit if taken is None else taken | hit
            tile_row.append(jnp.where(first, g, 0.0).astype(g.dtype))
        tile_rows.append(jnp.stack(tile_row, axis=3))
    return (jnp.stack(tile_rows, axis=2).reshape(x.shape),)


max_over_tiles.defvjp(_max_forward, _max_backward)
