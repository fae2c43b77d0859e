"""benchmarks/conv_ops.py: the im2col formulation it times computes the same convolution."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from benchmarks.conv_ops import jax_conv, jax_im2col_conv  # noqa: E402


@pytest.mark.parametrize("channels", [1, 3])
def test_im2col_equals_convolution(channels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 5, channels)).astype(np.float32)
    w = rng.standard_normal((3, 3, channels, 4)).astype(np.float32)
    direct = np.asarray(jax_conv(x, w))
    assert direct.shape == (2, 6, 5, 4)
    np.testing.assert_allclose(np.asarray(jax_im2col_conv(x, w)), direct, rtol=1e-5, atol=1e-5)


def test_im2col_differs_when_the_kernel_is_transposed():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 5, 5, 2)).astype(np.float32)
    w = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)
    flipped = np.ascontiguousarray(w[::-1, :, :, :])
    assert not np.allclose(np.asarray(jax_im2col_conv(x, flipped)), np.asarray(jax_conv(x, w)))
