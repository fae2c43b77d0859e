"""ms per batch of the training jitter on the running Keras backend: the Keras layers of
`keras_dml.training.augmentation` (what `keras-dml train --augment-*` ran before
`keras_dml.data.AffineJitter`) against `AffineJitter`, interleaved A B A B.

The batch is 128 x 28 x 28 x 1 float32 (Omniglot's), the jitter the omniglot recipe's
(shift 2 px, rotation 10 degrees, zoom 0.1). On TensorFlow both run in a tf.data map
(parallel, prefetched), as training runs them; elsewhere on NumPy batches, as
`ClassBalancedPyDataset` hands them over (jitted on JAX).

    KERAS_BACKEND=jax python benchmarks/jitter_cost.py [--rounds 5] [--batches 40]
"""

import argparse
import statistics
import time

import numpy as np

from keras_dml import backend
from keras_dml.backend.augmentation import training_call
from keras_dml.data import AffineJitter
from keras_dml.training.inputs import augmentation

__all__ = ["main"]


def _calls(x):
    """(Keras layers, AffineJitter): each a function drawing one jittered batch."""
    layers = augmentation(2.0, 10.0, 0.1, x.shape[1], 0)
    jitter = AffineJitter(2.0, 10.0, 0.1, seed=0)
    if not backend.is_tensorflow():
        old = training_call(layers)
        return (lambda: old(x, 0)), (lambda: jitter(x, 0))
    tf = backend.require_tensorflow("the tf.data road")

    def stream(fn):
        batches = tf.data.Dataset.from_tensors(tf.constant(x)).repeat().enumerate().map(
            fn, num_parallel_calls=tf.data.AUTOTUNE).prefetch(2)
        iterator = iter(batches)
        return lambda: next(iterator)

    return (stream(lambda step, b: layers(b, training=True)),
            stream(lambda step, b: jitter(b, step)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args(argv)
    x = np.random.default_rng(0).random((128, 28, 28, 1), dtype=np.float32)
    systems = dict(zip(("keras layers", "AffineJitter"), _calls(x)))
    for call in systems.values():
        call()  # compile / trace once
    times = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, call in systems.items():
            started = time.perf_counter()
            for _ in range(args.batches):
                call()
            times[name].append((time.perf_counter() - started) / args.batches * 1000)
    for name, values in times.items():
        print(f"{backend.name():10s} {name:13s} median {statistics.median(values):7.2f} "
              f"ms/batch, spread {min(values):.2f}-{max(values):.2f}")


if __name__ == "__main__":
    main()
