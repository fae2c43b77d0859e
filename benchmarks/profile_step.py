"""Where one training step of the main job goes, from the running backend's own profiler.

    KERAS_BACKEND=jax python -m benchmarks.profile_step --steps 20
    KERAS_BACKEND=jax python -m benchmarks.profile_step --before   # jit_compile=False

The main job's `DMLModel` (`training.build_model` and `training.compile_model` of the
default `TrainConfig`, `InstanceCrossEntropy`) is fitted on the main job's C x k stream
(`data.ClassBalancedPyDataset` over the bundled Omniglot, with the run's augmentation)
for `--warmup` steps, then for `--steps` steps under the profiler:

- JAX: `jax.profiler.trace`. XLA:CPU records one event per executed HLO instruction;
  each is mapped to the `op_name` metadata of the step's compiled HLO (the same step,
  lowered again), whose name scopes are the Keras layers, the loss and the optimizer.
- TensorFlow: `tf.profiler.experimental` trace, read from its XPlane: every executed
  TensorFlow op, its name scoped by layer, loss and optimizer (`gradient_tape/` for the
  backward pass).
- PyTorch: `torch.profiler`, `key_averages`: every layer's call, the loss, the optimizer
  and the NaN guard are wrapped in `record_function` ranges; autograd's backward nodes
  are attributed by their names (`ConvolutionBackward0` to the convolutions, ...).

On every backend the host-side parts are wrapped in the profiler's own annotations: the
sampler (`numpy_batch`: the batch's C x k indices) and the stream's `map_fn` (reported as
`augmentation`: the scaling to float32 and the run's augmentation, if any).

The report gives milliseconds per step of the wall time, and of each part: the network's
layers (convolutions, batch normalisation, ReLU, pooling, the embedding head; forward
and backward), the loss with its gradient, the optimizer, the NaN guard, other
ops, the sampler, the augmentation, and the rest of the wall time (Keras' loop,
callbacks, host-to-device copies, waiting). Compiled work on JAX and TensorFlow runs
on several threads at once: its figures are summed over threads, so they can add up
to more than the wall time; the `ops` line says how much.
"""

import argparse
import collections
import contextlib
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

import keras

from benchmarks import machine_info
from benchmarks.__main__ import cpu_model, write_json
from keras_dml import data, datasets, training
from keras_dml.training import inputs as training_inputs
from keras_dml.training.config import TrainConfig

PARTS = ("convolution", "batch norm", "relu", "pooling", "head", "loss", "optimizer",
         "nan guard", "other ops")
HOST_PARTS = ("sampler", "augmentation")
_LAYER_PARTS = (("conv", "convolution"), ("batch_norm", "batch norm"), ("bn", "batch norm"),
                ("relu", "relu"), ("pool", "pooling"), ("embedding", "head"))


def layer_parts(model):
    """{scope name: part} for the model's layers, its loss and its optimizer."""
    parts = {}
    for layer in model.layers:
        kind = type(layer).__name__.lower() + " " + layer.name.lower()
        for key, part in _LAYER_PARTS:
            if key in kind:
                parts[layer.name] = part
                break
    parts[model.loss.name] = "loss"
    parts[model.optimizer.name] = "optimizer"
    return parts


def part_of(op_name, parts):
    """(part, backward?) of an op whose name (or name scope) is `op_name`."""
    backward = "transpose(" in op_name or "gradient_tape" in op_name
    for scope in re.split(r"[/()]", op_name):
        scope = re.sub(r"_\d+$", "", scope)  # TensorFlow's call-count suffixes
        if scope in parts:
            return parts[scope], backward
    if re.search(r"is_finite|reduce_and|select_n|IsFinite|(^|/)All(_\d+)?$", op_name):
        return "nan guard", False
    if re.search(r"convolution|conv_general|Conv2D", op_name):
        return "convolution", backward
    return "other ops", backward


class Annotations:
    """Wraps the stream's sampler and map in the profiler's own annotations."""

    def __init__(self, annotate):
        self.annotate = annotate

    def wrap(self, name, function):
        def wrapped(*args, **kwargs):
            with self.annotate(name):
                return function(*args, **kwargs)
        return wrapped

    def install(self, stream):
        """Wraps what `stream` has of a sampler and a map (a replay of batches has neither)."""
        if getattr(stream, "sampler", None) is not None:
            stream.sampler.numpy_batch = self.wrap("sampler", stream.sampler.numpy_batch)
        if getattr(stream, "map_fn", None) is not None:
            stream.map_fn = self.wrap("augmentation", stream.map_fn)


def main_job(before=False, seed=0, loss=None):
    """(model, stream): the main job's compiled `DMLModel` (with `loss` by name, None:
    the command's default) and its training stream."""
    config = TrainConfig(seed=seed)
    train = datasets.load("omniglot").train
    input_shape, _ = training_inputs.input_spec(train, config.image_size)
    map_fn = training_inputs.augmented(training.array_transform(train, input_shape), config,
                                 input_shape)
    stream = data.ClassBalancedPyDataset(
        train.images, train.labels, config.classes_per_batch, config.samples_per_class,
        seed=seed, map_fn=map_fn)
    model = training.build_model(config, input_shape)
    training.compile_model(model, config, train.num_classes, loss=loss,
                           jit_compile=False if before else None)
    return model, stream


def _fit(model, stream, steps):
    model.fit(stream, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)


def _timed_fit(model, stream, steps):
    started = time.perf_counter()
    _fit(model, stream, steps)
    return time.perf_counter() - started


# --- JAX ------------------------------------------------------------------------------

def _hlo_op_names(model, stream):
    """{HLO instruction name: op_name} of the model's compiled train step."""
    import jax
    import jax.numpy as jnp

    state = model._get_jax_state(trainable_variables=True, non_trainable_variables=True,
                                 optimizer_variables=True, metrics_variables=True)
    x, y = stream[0]
    batch = [(jnp.asarray(x), jnp.asarray(y))]
    text = jax.jit(lambda s, d: model.train_step(s, d[0])).lower(state, batch).compile() \
        .as_text()
    return hlo_op_names(text)


def hlo_op_names(text):
    """{instruction name: op_name} of compiled HLO `text`. A fusion XLA:CPU built without
    metadata (the backward convolutions' library calls) is named after what it calls: a
    `convolution` in a training step's gradient ("transpose(convolution)"), else
    "layout" (XLA's transposes and copies)."""
    bodies, names, current = {}, {}, None
    for line in text.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) \(.*\{$", line)
        if header:
            current = bodies.setdefault(header.group(1), [])
            continue
        if current is not None:
            current.append(line)
    for line in text.splitlines():
        found = re.match(r"\s*(?:ROOT )?%?([\w.\-]+) = (.*)$", line)
        if not found:
            continue
        name, rest = found.groups()
        op_name = re.search(r'op_name="([^"]*)"', rest)
        calls = re.search(r"calls=%?([\w.\-]+)", rest)
        if op_name:
            names[name] = op_name.group(1)
        elif calls and " fusion(" in f" {rest}":
            body = "\n".join(bodies.get(calls.group(1), []))
            names[name] = "transpose(convolution)" if " convolution(" in body else "layout"
    return names


def profile_jax(model, stream, steps, trace_dir):
    import jax

    Annotations(jax.profiler.TraceAnnotation).install(stream)
    if not model.jit_compile:
        raise SystemExit("profile_step: --before on JAX runs Keras' un-jitted step op by op: "
                         "its profile has no compiled program to attribute")
    op_names = _hlo_op_names(model, stream)
    with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
        wall = _timed_fit(model, stream, steps)
    path = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    parts, totals = layer_parts(model), collections.Counter()
    matched = unmatched = 0.0
    for event in events:
        if event.get("ph") != "X":
            continue
        name, seconds = event["name"], event.get("dur", 0) / 1e6
        if name in HOST_PARTS:
            totals[name] += seconds
        elif name in op_names:
            part, backward = part_of(op_names[name], parts)
            totals[(part, backward)] += seconds
            matched += seconds
        elif "fusion" in name and re.match(r"^[\w\-]+(\.\d+)?$", name):
            unmatched += seconds
    return wall, totals, {"hlo_events_matched": round(matched / max(matched + unmatched,
                                                                      1e-12), 3)}


# --- TensorFlow -----------------------------------------------------------------------

_TF_CALLS = {"StatefulPartitionedCall", "PartitionedCall", "If", "StatelessIf", "While",
             "StatelessWhile", "Case", "StatelessCase"}

#: the op types (TensorFlow) listed by their time, heaviest first
TOP_OP_TYPES = 12


def profile_tensorflow(model, stream, steps, trace_dir):
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    Annotations(tf.profiler.experimental.Trace).install(stream)
    tf.profiler.experimental.start(trace_dir)
    try:
        wall = _timed_fit(model, stream, steps)
    finally:
        tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    path = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)[0]
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    parts, totals, op_types = layer_parts(model), collections.Counter(), collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                seconds = event.duration_ps / 1e12
                if name in HOST_PARTS:
                    totals[name] += seconds
                elif line.name.startswith("tf_Compute") and ":" in name and "::" not in name:
                    op, op_type = name.rsplit(":", 1)
                    if op_type not in _TF_CALLS:  # a call's ops are counted one by one
                        totals[part_of(op, parts)] += seconds
                        op_types[op_type] += seconds
    heaviest = {op_type: round(1e3 * seconds / steps, 2)
                for op_type, seconds in op_types.most_common(TOP_OP_TYPES)}
    return wall, totals, {"op_types_ms_per_step": heaviest}


# --- PyTorch --------------------------------------------------------------------------

_TORCH_BACKWARD = (("Convolution", "convolution"), ("BatchNorm", "batch norm"),
                   ("Relu", "relu"), ("MaxPool", "pooling"))


def profile_torch(model, stream, steps, trace_dir):
    import torch

    from keras_dml.backend.torch import trainer as trainer_torch

    annotations = Annotations(torch.profiler.record_function)
    annotations.install(stream)
    parts = layer_parts(model)
    for layer in model.layers:
        if layer.name in parts:
            layer.call = annotations.wrap(f"part:{parts[layer.name]}", layer.call)
    model.loss.call = annotations.wrap("part:loss", model.loss.call)
    model.optimizer.apply = annotations.wrap("part:optimizer", model.optimizer.apply)
    trainer_torch.all_finite = annotations.wrap("part:nan guard", trainer_torch.all_finite)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        wall = _timed_fit(model, stream, steps)
    totals = collections.Counter()
    for row in prof.key_averages():
        seconds = row.cpu_time_total / 1e6
        if row.key in HOST_PARTS:
            totals[row.key] += seconds
        elif row.key.startswith("part:"):
            totals[(row.key[5:], False)] += seconds
        elif row.key.startswith("autograd::engine::evaluate_function: "):
            node = row.key.split(": ", 1)[1]
            part = next((p for key, p in _TORCH_BACKWARD if key in node), "other ops")
            totals[(part, True)] += seconds
    return wall, totals, {"note": "other ops: autograd nodes of the head, the loss and "
                                  "their glue (matmuls, sums, ...)"}


PROFILERS = {"jax": profile_jax, "tensorflow": profile_tensorflow, "torch": profile_torch}


def report(wall, totals, steps):
    """{part: ms per step}, forward and backward, host parts and the rest of the wall."""
    per_step = 1e3 / steps
    rows = {}
    for part in PARTS:
        forward, backward = totals.get((part, False), 0.0), totals.get((part, True), 0.0)
        if forward or backward:
            rows[part] = {"forward": round(forward * per_step, 2),
                          "backward": round(backward * per_step, 2),
                          "total": round((forward + backward) * per_step, 2)}
    for part in HOST_PARTS:
        rows[part] = {"total": round(totals.get(part, 0.0) * per_step, 2)}
    compiled = sum(row["total"] for name, row in rows.items() if name not in HOST_PARTS)
    host = sum(rows[part]["total"] for part in HOST_PARTS)
    step = wall * per_step
    return {"wall_ms_per_step": round(step, 2), "parts": rows,
            "op_ms_per_step": round(compiled, 2),
            "rest_of_wall_ms_per_step": round(max(step - host - compiled, 0.0), 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_step",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20, help="profiled steps (default 20)")
    parser.add_argument("--warmup", type=int, default=5,
                        help="steps fitted before profiling (compilation; default 5)")
    parser.add_argument("--before", action="store_true",
                        help="profile the step compiled with jit_compile=False")
    parser.add_argument("--loss", default=None,
                        help="the main job's loss by name (default: the command's, "
                             "InstanceCrossEntropy), e.g. MultiSimilarity")
    parser.add_argument("--trace-dir", help="keep the profiler's trace in this folder")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.warmup < 1:
        parser.error("--steps and --warmup must be at least 1")
    backend = keras.backend.backend()
    model, stream = main_job(args.before, loss=args.loss)
    _fit(model, stream, args.warmup)
    load = os.getloadavg()
    with contextlib.ExitStack() as stack:
        trace_dir = args.trace_dir or stack.enter_context(tempfile.TemporaryDirectory())
        wall, totals, extra = PROFILERS[backend](model, stream, args.steps, trace_dir)
    info = {"backend": backend, "before": args.before, "loss": model.loss.name,
            "cpu": cpu_model(), "machine": machine_info.machine_info(),
            "logical_cpus": os.cpu_count(), "steps": args.steps,
            "load_average": [round(v, 2) for v in load + os.getloadavg()],
            **report(wall, totals, args.steps), **extra}
    print(f"{backend}{' (jit_compile=False)' if args.before else ''} on {info['cpu']} "
          f"({info['logical_cpus']} CPUs), {args.steps} profiled steps, load average "
          f"{info['load_average'][0]} at start, {info['load_average'][3]} at end")
    print(f"  wall {info['wall_ms_per_step']:.1f} ms/step; ops "
          f"{info['op_ms_per_step']:.1f} ms/step (summed over threads)")
    for name, row in info["parts"].items():
        split = (f"  (forward {row['forward']:.1f}, backward {row['backward']:.1f})"
                 if "forward" in row else "  (host)")
        print(f"  {name:16s} {row['total']:7.1f} ms{split}")
    print(f"  {'rest of wall':16s} {info['rest_of_wall_ms_per_step']:7.1f} ms  "
          "(Keras' loop, host-to-device copy, waiting)")
    for key in extra:
        print(f"  {key}: {extra[key]}")
    if args.json:
        write_json(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
