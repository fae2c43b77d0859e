"""The baseline a PyTorch user would otherwise run on photos, beside keras_dml on each
backend: images per second for training and for embedding.

    python -m benchmarks.torchvision_baseline --data-dir .../CUB_200_2011/images
    python -m benchmarks.torchvision_baseline --data-dir DIR --quick   # seconds: a check

Both sides get the same photos, network, transform, batches and steps:

- photos: the first `--classes` class folders of `--data-dir` (all by default), the first
  half to train on and the rest to embed, linked into a temporary folder as
  `train/<class>/` and `test/<class>/` (`photo_folder`): `ImageFolder` reads each part,
  and `keras-dml train --data-dir` takes the given split;
- network: keras_dml's `cnn3` (width 32, 128-d embedding, what `keras-dml train` builds)
  and the same layers in PyTorch (`torchvision_systems`); their trainable parameter
  counts, embedding sizes and transforms are checked equal before anything is timed;
- transform: resize to 73 x 73 (`--image-size` x 256 / 224), random 64 x 64 crop and
  horizontal flip for training, centre crop for embedding, pixels in [0, 1];
- training: C x k batches (`keras-dml train`'s default 32 x 4), MultiSimilarity with its
  VTHM miner (alpha 2, beta 50, base 0.5, epsilon 0.1), Adam 1e-3, `--steps` steps a
  unit; keras_dml as `benchmarks.own_images_systems` runs it, PyTorch with torchvision's
  `ImageFolder` + `DataLoader` (`--num-workers` processes on the same cores) and
  pytorch-metric-learning's `MPerClassSampler`, `MultiSimilarityLoss` and miner;
- embedding: the test photos in batches of 64, as `keras-dml embed` and `index` embed.

Timing (`benchmarks.processes`): each system in a worker process of its own with the
same thread count, set up (one unit run) and warmed up, then `--repeats` rounds in which
every system runs its unit once, in a fresh random order. The table gives each system's
median images per second [interquartile range] and, for keras_dml, the median [range]
over the rounds of its images per second divided by the PyTorch baseline's in the same
round (above 1: keras_dml is faster). `--peer-python` runs the PyTorch side under another
interpreter (an environment where torchvision imports beside its torch).
"""

import argparse
import os
import statistics
import sys
import tempfile

from benchmarks import processes
from benchmarks.__main__ import command_line, cpu_model, write_json

BACKENDS = ("tensorflow", "jax", "torch")
BASELINE = "PyTorch: torchvision + PML"
NAMES = {"tensorflow": "keras_dml on TensorFlow", "jax": "keras_dml on JAX",
         "torch": "keras_dml on PyTorch"}
_CHECKED_FACTS = ("trainable_parameters", "embedding_dim", "transform")


def photo_folder(data_dir, target, classes=None, images_per_class=None):
    """Links the first `classes` class folders of `data_dir` (the first
    `images_per_class` images of each) into `target/train/<class>/` (the first half of
    them) and `target/test/<class>/` (the rest); returns `target`.

    Raises:
        ValueError: fewer than 2 class folders to split.
    """
    names = sorted(n for n in os.listdir(data_dir) if os.path.isdir(os.path.join(data_dir, n)))
    names = names[:classes]
    if len(names) < 2:
        raise ValueError(f"--data-dir {data_dir}: {len(names)} class folder(s); the baseline "
                         "needs at least 2 (half train, half embedded).")
    half = len(names) // 2
    for number, name in enumerate(names):
        part = os.path.join(target, "train" if number < half else "test", name)
        os.makedirs(part)
        files = sorted(os.listdir(os.path.join(data_dir, name)))[:images_per_class]
        for file in files:
            os.symlink(os.path.join(os.path.abspath(data_dir), name, file),
                       os.path.join(part, file))
    return target


def systems(task, photos, args):
    """{name: (factory, kwargs)} of `task` ("train" or "embed") for the PyTorch baseline
    and keras_dml on each of `args.backends`."""
    resize = round(args.image_size * 256 / 224)  # keras-dml train's resize (checked below)
    design = {"classes_per_batch": args.classes_per_batch,
              "samples_per_class": args.samples_per_class}
    ours = {"data_dir": photos, "image_size": args.image_size, **design}
    peer = {"data_dir": photos, "resize": resize, "crop": args.image_size,
            "num_workers": args.num_workers}
    if task == "train":
        ours, peer = {**ours, "steps": args.steps}, {**peer, **design, "steps": args.steps}
    found = {BASELINE: (f"benchmarks.torchvision_systems:torchvision_{task}", peer)}
    for backend in args.backends:
        found[NAMES[backend]] = (f"benchmarks.on_{backend}:own_images_{task}", ours)
    return found


def check_same_work(results):
    """Raises SystemExit naming the first fact (parameter count, embedding size,
    transform) on which a keras_dml system and the baseline differ."""
    peer = results[BASELINE]["facts"]
    for name, result in results.items():
        for fact in _CHECKED_FACTS:
            if result["facts"].get(fact) != peer.get(fact):
                raise SystemExit(f"torchvision_baseline: {name} and the baseline differ in "
                                 f"{fact}: {result['facts'].get(fact)} against "
                                 f"{peer.get(fact)}; the comparison would not be fair.")


def throughput(results):
    """{name: {"images_per_s": [q1, median, q3], "ratio": [min, median, max] or None}}:
    images per second of each system, and keras_dml's per-round ratio to the baseline's."""
    rates = {name: [r["facts"]["images_per_unit"] / t for t in r["samples"]]
             for name, r in results.items()}
    rows = {}
    for name, values in rates.items():
        quartiles = (statistics.quantiles(values, n=4, method="inclusive")
                     if len(values) > 1 else [values[0]] * 3)
        row = {"images_per_s": [round(quartiles[0], 1), round(statistics.median(values), 1),
                                round(quartiles[2], 1)], "ratio": None}
        if name != BASELINE:
            ratios = [a / b for a, b in zip(values, rates[BASELINE])]
            row["ratio"] = [round(min(ratios), 2), round(statistics.median(ratios), 2),
                            round(max(ratios), 2)]
        rows[name] = row
    return rows


def measure(photos, args):
    """{"train": rows, "embed": rows, "facts": {name: facts}} (`throughput`'s rows)."""
    pythons = {BASELINE: args.peer_python} if args.peer_python else None
    pool = processes.Pool(args.threads, pythons=pythons)
    found = {}
    try:
        for task in ("train", "embed"):
            results = processes.compare(systems(task, photos, args), repeats=args.repeats,
                                        warmup=args.warmup, pool=pool)
            if pool.failures:
                raise SystemExit(f"torchvision_baseline: failed to build: {pool.failures}")
            check_same_work(results)
            found[task] = throughput(results)
            found.setdefault("facts", {})[task] = {n: r["facts"] for n, r in results.items()}
    finally:
        pool.close()
    return found


def table(found):
    """The Markdown table: system | training images/s | embedding images/s | ratio."""
    lines = ["| system | training images/s | embedding images/s | keras_dml / baseline "
             "(training; embedding) |", "| --- | --- | --- | --- |"]
    for name in found["train"]:
        cells = []
        for task in ("train", "embed"):
            q1, median, q3 = found[task][name]["images_per_s"]
            cells.append(f"{median:.1f} [{q1:.1f}-{q3:.1f}]")
        ratios = [found[task][name]["ratio"] for task in ("train", "embed")]
        ratio = "1 (the baseline)" if ratios[0] is None else "; ".join(
            f"{r[1]:.2f} [{r[0]:.2f}-{r[2]:.2f}]" for r in ratios)
        lines.append(f"| {name} | {cells[0]} | {cells[1]} | {ratio} |")
    return "\n".join(lines)


def _arguments(argv):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.torchvision_baseline",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="root/<class>/<image> photos")
    parser.add_argument("--classes", type=int, help="the first N class folders (default all)")
    parser.add_argument("--images-per-class", type=int, help="default: all")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--classes-per-batch", type=int, default=32, help="C (default 32)")
    parser.add_argument("--samples-per-class", type=int, default=4, help="k (default 4)")
    parser.add_argument("--steps", type=int, default=20, help="training steps a unit")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=1, help="untimed units first")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=2,
                        help="the DataLoader's worker processes (default 2)")
    parser.add_argument("--peer-python", help="interpreter of the PyTorch side (default: this)")
    parser.add_argument("--quick", action="store_true",
                        help="8 classes of 8 images, 32 px, 4 x 2 batches, 3 steps, 1 round")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.quick:
        args.classes, args.images_per_class, args.image_size = 8, 8, 32
        args.classes_per_batch, args.samples_per_class = 4, 2
        args.steps, args.repeats, args.warmup = 3, 1, 0
    if min(args.steps, args.repeats, args.threads) < 1 or args.warmup < 0:
        parser.error("--steps, --repeats and --threads must be at least 1, --warmup at least 0")
    return args


def main(argv=None):
    args = _arguments(argv)
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        photos = photo_folder(args.data_dir, folder, args.classes, args.images_per_class)
        found = measure(photos, args)
    info = {"command": command_line("benchmarks.torchvision_baseline", argv),
            "cpu": cpu_model(), "logical_cpus": os.cpu_count(), "threads": args.threads,
            "load_average": [round(v, 2) for v in load + os.getloadavg()], **found}
    print(table(found))
    print(f"load average {info['load_average'][0]} at start, {info['load_average'][3]} at end")
    if args.json:
        write_json(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
