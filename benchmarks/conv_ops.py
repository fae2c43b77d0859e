"""cnn3's three convolutions alone, forward and weight gradient, on JAX (XLA:CPU) and TensorFlow.

Issue 49 asks whether JAX's slower convolutions in the main job are keras_dml's or XLA:CPU's.
This times the bare ops at the main job's shapes (batch 128, 28x28x1 input, 64 filters, 3x3,
"SAME"), each backend in this one process, median of 30 calls, median of 3 repeats. On JAX it
also times the im2col + matmul formulation (a candidate for the 1-channel first layer) and
checks it gives the same output.

Examples:
    python -m benchmarks.conv_ops
"""

import platform
import time

import numpy as np

SHAPES = [(28, 1), (14, 64), (7, 64)]  # (height = width, input channels) of conv1..conv3


def _median_ms(call, repeats=30):
    call()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1e3 * float(np.median(times))


def jax_conv(x, w):
    """cnn3's convolution on JAX: NHWC input, HWIO kernel, stride 1, "SAME"."""
    import jax

    numbers = ("NHWC", "HWIO", "NHWC")
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=numbers)


def jax_im2col_conv(x, w):
    """The same convolution as `jax_conv`, as 3x3 patches (im2col) times the kernel matrix."""
    import jax
    import jax.numpy as jnp

    kh, kw, ci, co = w.shape
    patches = jax.lax.conv_general_dilated_patches(
        x, (kh, kw), (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )  # channel order (ci, kh, kw)
    return patches @ jnp.transpose(w, (2, 0, 1, 3)).reshape(ci * kh * kw, co)


def _jax_rows(inputs):
    import jax
    import jax.numpy as jnp

    conv, im2col = jax_conv, jax_im2col_conv

    def weight_grad(f):
        return jax.jit(lambda x, w: jax.grad(lambda w: f(x, w).sum())(w))

    rows = []
    for (hw, ci), (x, w) in zip(SHAPES, inputs):
        x, w = jnp.asarray(x), jnp.asarray(w)
        fns = [jax.jit(conv), jax.jit(im2col), weight_grad(conv), weight_grad(im2col)]
        figures = [
            np.median([_median_ms(lambda f=f: f(x, w).block_until_ready()) for _ in range(3)])
            for f in fns
        ]
        diff = float(jnp.max(jnp.abs(conv(x, w) - im2col(x, w))))
        rows.append((hw, ci, *figures, diff))
    return rows


def _tensorflow_rows(inputs):
    import tensorflow as tf

    conv = tf.function(lambda x, w: tf.nn.conv2d(x, w, 1, "SAME"))
    rows = []
    for x, w in inputs:
        x, w = tf.constant(x), tf.constant(w)
        rows.append(np.median([_median_ms(lambda: conv(x, w).numpy()) for _ in range(3)]))
    return rows


def _cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main():
    rng = np.random.default_rng(0)
    inputs = [
        (rng.random((128, hw, hw, ci), np.float32), rng.random((3, 3, ci, 64), np.float32))
        for hw, ci in SHAPES
    ]
    jax_rows = _jax_rows(inputs)
    tf_rows = _tensorflow_rows(inputs)
    print(f"CPU: {_cpu_model()}; ms, median")
    print("conv            | TF fwd | JAX fwd | JAX im2col fwd | JAX dW | JAX im2col dW | diff")
    for (hw, ci, fwd, col, dw, col_dw, diff), tf_fwd in zip(jax_rows, tf_rows):
        print(
            f"{f'{hw}x{hw}x{ci}->64':<15} | {tf_fwd:6.2f} | {fwd:7.2f} | {col:14.2f} | "
            f"{dw:6.2f} | {col_dw:13.2f} | {diff:.1e}"
        )


if __name__ == "__main__":
    main()
