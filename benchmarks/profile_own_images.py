"""One training step of the own-images road, split: the file pipeline, the hand-over to
the backend, and the step itself (forward, backward, loss, optimizer).

    KERAS_BACKEND=jax python -m benchmarks.profile_own_images --data-dir photos/ --steps 20

The run is `keras-dml train --data-dir DIR --image-size 64` (cnn3, the default C x k,
the training stream `keras-dml train` builds on this backend; `--backbone
MobileNetV3Small --image-size 128`: that Keras Applications network with random weights,
as `--weights none` trains it), measured in four parts on the same batches, one after
the other in one process:

- file pipeline: the tf.data stream alone (read, decode, resize, crop and flip), its
  batches pulled as fast as it delivers them (its own parallel reads and prefetch);
- hand-over: a decoded batch (tf.data tensors) to NumPy, then to the backend's arrays
  (`jax.device_put`, `torch.as_tensor`; TensorFlow keeps its tensors);
- step on batches in memory: `fit` on the same decoded batches held as NumPy arrays,
  split into its parts by the backend's own profiler (`benchmarks.profile_step`);
- step from files: `fit` on the file stream, as `keras-dml train` runs it;
- plain-Keras twin: the same network in Keras' own layers (an Applications network as
  Keras builds it) with a softmax head (`benchmarks.training_step.plain_model`), `fit`
  on the same batches in memory: what Keras alone costs on this backend.

Each step figure is the median over `--rounds` interleaved rounds of the time from the
end of a `fit`'s first step to the end of its last (each synchronised by reading the
loss), so the stream's start-up is not in it.

"step from files / step in memory" is the cost of the file road that the step does not
hide; the pipeline's own time says whether it could be hidden at all on these cores.
"""

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import tempfile
import time

import keras
import numpy as np

from benchmarks.__main__ import command_line, cpu_model, write_json
from benchmarks.profile_step import PROFILERS, report
from benchmarks.training_step import _StepClock, plain_model
from keras_dml import datasets
from keras_dml.datasets.layout import detect_dataset
from keras_dml.training import inputs
from keras_dml.training.config import TrainConfig, own_files_options
from keras_dml.training.model import build_model, compile_model


class MemoryBatches(keras.utils.PyDataset):
    """Decoded batches held as NumPy arrays, replayed in a cycle (an infinite stream)."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    @property
    def num_batches(self):
        return None

    def __getitem__(self, index):
        return self.batches[index % len(self.batches)]


@dataclasses.dataclass
class OwnImagesJob:
    """What `keras-dml train --data-dir DIR` builds: the compiled model, its training
    stream, the config, the model's input shape, the training classes, the image files'
    `Preprocessing` (its `eval` is what `keras-dml embed` and `index` apply) and the
    splits."""

    model: object
    stream: object
    config: TrainConfig
    input_shape: tuple
    num_classes: int
    preprocessing: object
    splits: object


def own_images_job(data_dir, image_size, seed=0, classes_per_batch=None,
                   samples_per_class=None, **options):
    """The `OwnImagesJob` of `keras-dml train --data-dir DIR --image-size N`, built as the
    run builds it on this backend (C and k: the run's defaults unless given; `options`:
    other `TrainConfig` fields, e.g. `backbone`, `weights`, `loss`)."""
    config = TrainConfig(dataset=detect_dataset(data_dir), data_dir=data_dir,
                         image_size=image_size, seed=seed, classes_per_batch=classes_per_batch,
                         samples_per_class=samples_per_class, **options)
    splits = datasets.load(config.dataset, data_dir=data_dir,
                           **own_files_options(config.dataset, config.test_classes))
    input_shape, preprocessing = inputs.input_spec(splits.train, config.image_size,
                                                   config.backbone, config.augment_crop)
    strategy = inputs.strategy_for(config.strategy)
    scope = contextlib.nullcontext() if strategy is None else strategy.scope()
    with scope:
        model = build_model(config, input_shape)
        compile_model(model, config, splits.train.num_classes)
    stream = inputs.training_batches(strategy, splits.train, config, preprocessing,
                                     inputs.augmented(None, config, input_shape))
    return OwnImagesJob(model, stream, config, input_shape, splits.train.num_classes,
                        preprocessing, splits)


def _per_batch(function, items):
    started = time.perf_counter()
    for item in items:
        function(item)
    return (time.perf_counter() - started) / len(items)


def hand_over(batches):
    """{"to NumPy": s, "to the backend": s} per batch, for tf.data tensors `batches`."""
    numpy = [tuple(np.asarray(t) for t in batch) for batch in batches]
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        def to_backend(batch):
            jax.block_until_ready(jax.device_put(batch))
    elif backend == "torch":
        import torch

        def to_backend(batch):
            tuple(torch.as_tensor(a) for a in batch)
    else:
        def to_backend(batch):
            return batch
    return {"to NumPy": _per_batch(lambda b: tuple(t.numpy() for t in b), batches),
            "to the backend": _per_batch(to_backend, numpy)}, numpy


def _timed_fit(model, stream, steps):
    clock = _StepClock()
    model.fit(stream, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False,
              callbacks=[clock])
    return clock.seconds_per_step()


def measure(data_dir, image_size, steps, warmup, rounds, trace_dir, batch=(None, None),
            backbone="cnn3", profile=True):
    """The parts (module docstring), in ms per batch; the step ones as the median of
    `rounds` interleaved rounds. `batch`: (C, k), None for the run's defaults;
    `backbone`: "cnn3" or a Keras Applications name, with random weights; `profile`:
    False leaves the profiler's split out."""
    job = own_images_job(data_dir, image_size, classes_per_batch=batch[0],
                         samples_per_class=batch[1], backbone=backbone, weights="none")
    model, stream, config = job.model, job.stream, job.config
    iterator = iter(stream)
    for _ in range(warmup):
        next(iterator)
    started = time.perf_counter()
    decoded = [next(iterator) for _ in range(steps)]
    pipeline = (time.perf_counter() - started) / steps
    handover, numpy = hand_over(decoded)
    memory = MemoryBatches(numpy)
    plain = plain_model(job.input_shape, job.num_classes, config.width, config.embedding_dim,
                        config.backbone)
    systems = {"step in memory": (model, memory), "step from files": (model, stream),
               "plain Keras step in memory": (plain, memory)}
    times = {name: [] for name in systems}
    for round_index in range(rounds + 1):  # round 0 compiles and warms up
        for name, (fitted, batches) in systems.items():
            seconds = _timed_fit(fitted, batches, steps)
            if round_index:
                times[name].append(seconds)
    if profile:
        wall, totals, extra = PROFILERS[keras.backend.backend()](model, memory, steps, trace_dir)
        extra = {"split of the step in memory (profiler)": report(wall, totals, steps), **extra}
    else:
        extra = {}
    ms = lambda s: round(1e3 * s, 1)  # noqa: E731
    ratio = lambda a, b: round(float(np.median(np.divide(times[a], times[b]))), 2)  # noqa: E731
    return {"file pipeline": ms(pipeline),
            "hand-over": {k: round(1e3 * v, 3) for k, v in handover.items()},
            **{name: ms(float(np.median(values))) for name, values in times.items()},
            "files / memory": ratio("step from files", "step in memory"),
            "keras_dml / plain Keras, in memory": ratio("step in memory",
                                                        "plain Keras step in memory"),
            "rounds": {name: [ms(v) for v in values] for name, values in times.items()},
            **extra}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_own_images",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="root/<class>/<image> folder")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--backbone", default="cnn3",
                        help="cnn3 (default) or a Keras Applications name, e.g. "
                             "MobileNetV3Small (random weights)")
    parser.add_argument("--no-profile", action="store_true",
                        help="leave out the profiler's split of the step")
    parser.add_argument("--steps", type=int, default=20, help="steps per measurement")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3,
                        help="interleaved rounds of the two step timings (median)")
    parser.add_argument("--classes-per-batch", type=int, help="C (default: keras-dml train's)")
    parser.add_argument("--samples-per-class", type=int, help="k (default: keras-dml train's)")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if min(args.steps, args.warmup, args.rounds) < 1:
        parser.error("--steps, --warmup and --rounds must be at least 1")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as trace_dir:
        info = measure(args.data_dir, args.image_size, args.steps, args.warmup, args.rounds,
                       trace_dir, (args.classes_per_batch, args.samples_per_class),
                       args.backbone, not args.no_profile)
    info = {"backend": keras.backend.backend(), "cpu": cpu_model(),
            "command": command_line("benchmarks.profile_own_images", argv),
            "logical_cpus": os.cpu_count(), "backbone": args.backbone,
            "image_size": args.image_size,
            "steps": args.steps, "load_average": [round(v, 2) for v in load + os.getloadavg()],
            **info}
    print(json.dumps(info, indent=2))
    if args.json:
        write_json(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
