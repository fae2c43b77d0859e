"""The main job's training step against a plain-Keras step of the same network, on the
running Keras backend, side by side in one process.

    KERAS_BACKEND=jax python -m benchmarks.training_step --steps 30 --rounds 5

Systems (each a `model.fit` on the same C x k NumPy stream of the bundled Omniglot,
`keras_dml.data.ClassBalancedPyDataset`, 32 x 4 = 128 images of 28 x 28):

- `plain`: the network of the main job (3 x conv 3x3 of 32 filters, Keras'
  `BatchNormalization`, ReLU, max-pool; a 128-d dense layer) with a softmax head over
  the 964 training classes, `SparseCategoricalCrossentropy`, Adam: Keras alone.
- `main_job`: the main job's `DMLModel` (`training.build_model` of the default
  `TrainConfig`: keras_dml's `cnn3` and `EmbeddingHead`) compiled as `keras-dml train`
  compiles it (`training.compile_model`), `InstanceCrossEntropy`.
- `multi_similarity`: the same `DMLModel` with `MultiSimilarity` and its miner.
- `main_job_eager` (`--before`): the main job compiled with `jit_compile=False`, as
  `keras-dml train` compiled it before 2026-11-28 (on JAX: Keras' un-jitted step).

Every round runs each system's `fit` for `--steps` steps in a fresh random order; a
system's step time is the time from the end of its first step (synchronised) to the end
of its last (synchronised), over the steps between, so the data feeding is in the
figure and the first step's compilation is not. The report gives each system's median
step with its interquartile range, and the median of the per-round ratios to `plain`
with their range, the CPU model and the load average.
"""

import argparse
import os
import random
import statistics
import sys
import time

import keras

from benchmarks.__main__ import cpu_model, write_json
from keras_dml import data, datasets, training
from keras_dml.training import inputs as training_inputs
from keras_dml.training.config import TrainConfig


class _StepClock(keras.callbacks.Callback):
    """Seconds per step after the first, each end synchronised by reading the loss."""

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])
        if batch == 0:
            self.started = time.perf_counter()
        self.last, self.batches = time.perf_counter(), batch

    def seconds_per_step(self):
        return (self.last - self.started) / self.batches


def plain_model(input_shape, classes, width, embedding_dim, backbone="cnn3"):
    """The main job's network with stock Keras layers and a softmax head.

    `backbone` a Keras Applications name instead of "cnn3": that network as Keras builds
    it (random weights, its own preprocessing inside), globally average-pooled, then the
    same dense embedding and softmax head (`width` unused)."""
    if backbone == "cnn3":
        inputs = keras.Input(shape=input_shape)
        x = inputs
        for _ in range(3):
            x = keras.layers.Conv2D(width, 3, padding="same")(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
            x = keras.layers.MaxPooling2D()(x)
        features = keras.layers.Flatten()(x)
    else:
        network = getattr(keras.applications, backbone)(include_top=False, weights=None,
                                                        input_shape=tuple(input_shape))
        inputs = network.input
        features = keras.layers.GlobalAveragePooling2D()(network.output)
    x = keras.layers.Dense(embedding_dim)(features)
    outputs = keras.layers.Dense(classes, activation="softmax")(x)
    model = keras.Model(inputs, outputs, name="plain")
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy())
    return model


def dml_model(config, input_shape, num_classes, loss=None, jit_compile=None):
    """The main job's `DMLModel`, compiled as `keras-dml train` compiles it."""
    model = training.build_model(config, input_shape)
    training.compile_model(model, config, num_classes, loss=loss, jit_compile=jit_compile)
    return model


def systems(before=False):
    """{name: builder(config, input_shape, num_classes)}."""
    found = {
        "plain": lambda c, s, n: plain_model(s, n, c.width, c.embedding_dim),
        "main_job": lambda c, s, n: dml_model(c, s, n),
        "multi_similarity": lambda c, s, n: dml_model(c, s, n, loss="MultiSimilarity"),
    }
    if before:
        found["main_job_eager"] = lambda c, s, n: dml_model(c, s, n, jit_compile=False)
    return found


def measure(steps=30, rounds=5, before=False, seed=0):
    """Per-round seconds per step of every system, and their ratios to `plain`."""
    config = TrainConfig(seed=seed)
    train = datasets.load("omniglot").train
    input_shape, _ = training_inputs.input_spec(train, config.image_size)
    stream = data.ClassBalancedPyDataset(
        train.images, train.labels, config.classes_per_batch, config.samples_per_class,
        seed=seed, map_fn=training.array_transform(train, input_shape))
    built = {name: build(config, input_shape, train.num_classes)
             for name, build in systems(before).items()}
    order, samples = list(built), {name: [] for name in built}
    rng = random.Random(seed)
    for round_index in range(rounds + 1):  # round 0 compiles and warms up
        rng.shuffle(order)
        for name in order:
            clock = _StepClock()
            built[name].fit(stream, epochs=1, steps_per_epoch=steps, verbose=0,
                            callbacks=[clock], shuffle=False)
            if round_index:
                samples[name].append(clock.seconds_per_step())
    return samples


def _quartiles(values):
    values = sorted(values)
    if len(values) < 2:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def summary(samples):
    """{name: {step_ms: [q1, median, q3], ratio_to_plain: [min, median, max]}}."""
    rows = {}
    for name, values in samples.items():
        q1, median, q3 = _quartiles(values)
        ratios = [a / b for a, b in zip(values, samples["plain"])]
        rows[name] = {"step_ms": [round(1e3 * v, 1) for v in (q1, median, q3)],
                      "ratio_to_plain": [round(v, 2) for v in (
                          min(ratios), statistics.median(ratios), max(ratios))]}
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training_step",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="steps per fit (default 30)")
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (default 5)")
    parser.add_argument("--before", action="store_true",
                        help="also time the main job compiled with jit_compile=False")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.steps < 2 or args.rounds < 1:
        parser.error("--steps must be at least 2 and --rounds at least 1")
    load = os.getloadavg()
    rows = summary(measure(args.steps, args.rounds, args.before))
    info = {"backend": keras.backend.backend(), "cpu": cpu_model(),
            "logical_cpus": os.cpu_count(), "steps": args.steps, "rounds": args.rounds,
            "load_average": [round(v, 2) for v in load + os.getloadavg()],
            "systems": rows}
    print(f"{info['backend']} on {info['cpu']} ({info['logical_cpus']} CPUs), "
          f"{args.rounds} rounds of {args.steps} steps, load average "
          f"{info['load_average'][0]} at start, {info['load_average'][3]} at end")
    for name, row in rows.items():
        q1, median, q3 = row["step_ms"]
        low, ratio, high = row["ratio_to_plain"]
        print(f"  {name:18s} {median:7.1f} ms [{q1}-{q3}]   x plain {ratio:.2f} "
              f"[{low:.2f}-{high:.2f}]")
    if args.json:
        write_json(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
