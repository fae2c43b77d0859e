"""The embedder's forward pass beside its twins, in one process on the running backend:
whose is the time of an inference pass on this backend?

    KERAS_BACKEND=jax python -m benchmarks.forward_twins
    KERAS_BACKEND=torch python -m benchmarks.forward_twins --quick     # seconds: a check

On the same random batches held in memory (64 images of 64 x 64 x 3 by default), images
per second of:

- keras_dml: `keras-dml train`'s cnn3 embedder (random weights) through
  `keras_dml.inference.inference_function`, what `embed`, `index` and `evaluate` run;
- plain Keras: the same network from Keras' own layers (`training_step.plain_model`'s:
  Conv2D, BatchNormalization, ReLU, MaxPooling2D, Dense), L2-normalised, through the
  same inference function, except on PyTorch: there Keras' own call under `no_grad`
  (keras_dml's inference function would fuse Keras' layers too);
- the framework alone, no Keras: on JAX a `jax.jit` of `lax.conv_general_dilated`,
  scale and shift, ReLU, `lax.reduce_window` max and a matmul (NHWC); on PyTorch the
  same layers in `torch.nn` under `no_grad`, on NCHW tensors and on NCHW views of
  channels-last memory; on TensorFlow a `tf.function` of the same ops (NHWC).

Each is warmed up, then timed in `--rounds` rounds, interleaved; the table gives the
median and the range.
"""

import argparse
import os
import sys
import time

import numpy as np

from benchmarks.__main__ import command_line, cpu_model, write_json
from benchmarks.processes import summary

WIDTH, BLOCKS, EMBEDDING = 32, 3, 128


def _weights(size, channels, seed=0):
    """Random conv kernels (HWIO), per-channel scales and shifts, and the dense matrix."""
    rng = np.random.default_rng(seed)
    blocks, c = [], channels
    for _ in range(BLOCKS):
        blocks.append((rng.normal(size=(3, 3, c, WIDTH)).astype("float32") * 0.1,
                       rng.normal(size=WIDTH).astype("float32"),
                       np.ones(WIDTH, "float32")))
        c, size = WIDTH, size // 2
    return blocks, rng.normal(size=(size * size * WIDTH, EMBEDDING)).astype("float32") * 0.01


def _bare_jax(blocks, dense):
    import jax
    import jax.numpy as jnp

    @jax.jit
    def forward(x):
        for kernel, shift, scale in blocks:
            x = jax.lax.conv_general_dilated(x, kernel, (1, 1), "SAME",
                                             dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = jax.nn.relu(x * scale + shift)
            x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1),
                                      "VALID")
        x = x.reshape(x.shape[0], -1) @ dense
        return x / jnp.linalg.norm(x, axis=1, keepdims=True)

    return {"JAX alone (jax.jit, NHWC)": lambda x: np.asarray(forward(x))}


def _bare_torch(blocks, dense):
    import torch

    layers = []
    for kernel, shift, scale in blocks:
        conv = torch.nn.Conv2d(kernel.shape[2], kernel.shape[3], 3, padding=1)
        conv.weight.data = torch.from_numpy(kernel.transpose(3, 2, 0, 1).copy())
        conv.bias.data = torch.from_numpy(shift)
        layers += [conv, torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
    network = torch.nn.Sequential(*layers).eval()
    matrix = torch.from_numpy(dense)

    def run(x):
        with torch.no_grad():
            y = network(x).permute(0, 2, 3, 1).reshape(x.shape[0], -1) @ matrix
            return torch.nn.functional.normalize(y, dim=1).numpy()

    def nchw(x):
        return run(torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))))

    def channels_last(x):
        return run(torch.from_numpy(x).permute(0, 3, 1, 2))

    return {"PyTorch alone (NCHW)": nchw,
            "PyTorch alone (channels-last memory)": channels_last}


def _bare_tensorflow(blocks, dense):
    import tensorflow as tf

    @tf.function(reduce_retracing=True)
    def forward(x):
        for kernel, shift, scale in blocks:
            x = tf.nn.relu(tf.nn.conv2d(x, kernel, 1, "SAME") * scale + shift)
            x = tf.nn.max_pool2d(x, 2, 2, "VALID")
        x = tf.reshape(x, (tf.shape(x)[0], -1)) @ dense
        return tf.math.l2_normalize(x, axis=1)

    return {"TensorFlow alone (tf.function, NHWC)": lambda x: forward(x).numpy()}


def _plain_keras(size, channels):
    """`training_step.plain_model`'s cnn3 (Keras' own layers) up to its embedding,
    L2-normalised as keras_dml's embedder is."""
    import keras

    from benchmarks.training_step import plain_model

    model = plain_model((size, size, channels), 2, WIDTH, EMBEDDING)
    embedding = model.layers[-2].output  # the dense embedding before the softmax head
    return keras.Model(model.input, keras.layers.UnitNormalization()(embedding))


def _keras_pass(model):
    """PyTorch: Keras' own inference call, no gradient recorded (without the fused pass
    of `keras_dml.backend.torch.inference`)."""
    import torch

    def forward(x):
        with torch.no_grad():
            return model(x, training=False)

    return forward


def systems(size):
    """{name: forward(x) -> NumPy embeddings} on the running backend."""
    import keras

    from benchmarks.embed_throughput import embedder_and_preprocessing
    from keras_dml.inference import inference_function

    def as_numpy(forward):
        return lambda x: keras.ops.convert_to_numpy(forward(x))

    embedder, _ = embedder_and_preprocessing("cnn3", size)
    bare = {"jax": _bare_jax, "torch": _bare_torch,
            "tensorflow": _bare_tensorflow}[keras.backend.backend()]
    plain = _plain_keras(size, 3)
    return {"keras_dml": as_numpy(inference_function(embedder)),
            "plain Keras": as_numpy(_keras_pass(plain) if keras.backend.backend() == "torch"
                                    else inference_function(plain)),
            **bare(*_weights(size, 3))}


def measure(size=64, batch=64, batches=16, rounds=5):
    """{name: `processes.summary`} of each system's images per second."""
    rng = np.random.default_rng(0)
    data = [rng.random((batch, size, size, 3), dtype=np.float32) for _ in range(batches)]
    runs = systems(size)
    rates = {name: [] for name in runs}
    for forward in runs.values():  # builds, traces, compiles
        forward(data[0])
    for _ in range(rounds):
        for name, forward in runs.items():
            started = time.perf_counter()
            for x in data:
                forward(x)
            rates[name].append(batch * batches / (time.perf_counter() - started))
    return {name: summary(values) for name, values in rates.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.forward_twins",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batches", type=int, default=16, help="batches a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="32 px, 2 batches, 1 round")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.image_size, args.batches, args.rounds = 32, 2, 1
    for flag in ("image_size", "batch_size", "batches", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, flag)}")
    if args.image_size % 2 ** BLOCKS:
        parser.error(f"--image-size must be a multiple of {2 ** BLOCKS}, got {args.image_size}")
    import keras

    table = measure(args.image_size, args.batch_size, args.batches, args.rounds)
    print(f"cnn3 forward, {args.batch_size} x {args.image_size} x {args.image_size} x 3 "
          f"in memory, {keras.backend.backend()}, {os.cpu_count()} CPUs ({cpu_model()})")
    print("| system | images/s [range] |\n| --- | --- |")
    for name, cell in table.items():
        print(f"| {name} | {cell['median']:.0f} [{cell['min']:.0f}-{cell['max']:.0f}] |")
    if args.json:
        write_json(args.json, {"command": command_line("benchmarks.forward_twins", argv),
                               "backend": keras.backend.backend(), "figures": table})
    return table


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
