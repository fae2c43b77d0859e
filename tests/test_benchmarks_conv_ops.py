"""benchmarks/conv_ops.py: the im2col formulation it times computes the same convolution."""

import numpy as np
import pytest

pytestmark = pytest.mark.requires("jax")


def _conv_ops():
    from benchmarks import conv_ops

    return conv_ops


@pytest.mark.parametrize("channels", [1, 3])
def test_im2col_equals_convolution(channels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 5, channels)).astype(np.float32)
    w = rng.standard_normal((3, 3, channels, 4)).astype(np.float32)
    ops = _conv_ops()
    direct = np.asarray(ops.jax_conv(x, w))
    assert direct.shape == (2, 6, 5, 4)
    np.testing.assert_allclose(np.asarray(ops.jax_im2col_conv(x, w)), direct, rtol=1e-5, atol=1e-5)


def test_im2col_differs_when_the_kernel_is_transposed():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)
    flipped = np.ascontiguousarray(w[::-1, :, :, :])
    ops = _conv_ops()
    assert not np.allclose(np.asarray(ops.jax_im2col_conv(x, flipped)),
                           np.asarray(ops.jax_conv(x, w)))
