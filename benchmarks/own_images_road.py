"""The own-images road from the command line on each backend: `keras-dml train` on a
folder of photos, then `keras-dml index` of the same folder into a Milvus Lite file.

    python -m benchmarks.own_images_road --data-dir .../CUB_200_2011/images

Each run is a fresh process, as a user meets it, with the same thread count for every
backend (`benchmarks.processes.thread_env`); `--rounds` rounds, the backends in a fresh
random order each round. Per backend the table gives Keras' step time of each epoch
(its progress line), the run's training time (`summary.json`'s `train_seconds`) and the
index command's images per second (its own report), as medians over the rounds with the
spread, and each as a ratio to TensorFlow's. `--quick` runs a few steps on a few photos.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

from benchmarks.__main__ import command_line, cpu_model, write_json
from benchmarks.processes import summary, thread_env

BACKENDS = ("tensorflow", "jax", "torch")
QUICK = {"epochs": 2, "steps_per_epoch": 3, "image_size": 32, "rounds": 1,
         "classes_per_batch": 2, "samples_per_class": 2}
_STEP = re.compile(r"(\d+(?:\.\d+)?)(ms|s)/step")
_RATE = re.compile(r"added (\d+) images \((\d+(?:\.\d+)?) images/s\)")


def _run(argv, backend, threads):
    env = {**thread_env(threads), "KERAS_BACKEND": backend}
    result = subprocess.run([sys.executable, "-m", "keras_dml.cli", *argv], env=env,
                            capture_output=True, text=True)
    if result.returncode:
        raise RuntimeError(f"keras-dml {argv[0]} on {backend} exited {result.returncode}:\n"
                           + result.stderr[-3000:])
    return result.stdout + result.stderr


def step_times(output):
    """The step time of each epoch, in ms, from Keras' progress lines (the last figure
    an epoch printed)."""
    epochs, current = [], None
    for line in output.splitlines():
        if re.match(r"\s*Epoch \d+/\d+", line):
            if current is not None:
                epochs.append(current)
            current = None
        found = _STEP.findall(line)
        if found:
            value, unit = found[-1]
            current = float(value) * (1000.0 if unit == "s" else 1.0)
    if current is not None:
        epochs.append(current)
    return epochs


def road(backend, data_dir, folder, args):
    """One backend's train + index: {"steps_ms": [per epoch], "train_s", "images_indexed",
    "index_images_s"}."""
    name = backend
    batch = []
    for flag in ("classes_per_batch", "samples_per_class"):
        if getattr(args, flag) is not None:
            batch += ["--" + flag.replace("_", "-"), str(getattr(args, flag))]
    out = _run(["train", "--data-dir", data_dir, "--image-size", str(args.image_size),
                "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch),
                *batch, "--runs-dir", folder, "--run-name", name, "--no-export",
                "--no-plots"], backend, args.threads)
    run = os.path.join(folder, name)
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    indexed = _run(["index", run, "--images", data_dir, "--uri",
                    os.path.join(folder, f"{name}.db")], backend, args.threads)
    rate = _RATE.search(indexed)
    if rate is None:
        raise RuntimeError(f"keras-dml index on {backend} reported no rate:\n{indexed[-2000:]}")
    return {"steps_ms": step_times(out), "train_s": summary["train_seconds"],
            "images_indexed": int(rate.group(1)), "index_images_s": float(rate.group(2))}


def summarize(results):
    """{backend: {measure: `processes.summary` of the rounds}} from each round's `road`
    results, with "ratio to TF" of each median where TensorFlow ran."""
    table = {}
    for backend, rounds in results.items():
        epochs = len(rounds[0]["steps_ms"])
        row = {f"step, epoch {e + 1} (ms)": summary([r["steps_ms"][e] for r in rounds])
               for e in range(epochs)}
        row["training (s)"] = summary([r["train_s"] for r in rounds])
        row["index (images/s)"] = summary([r["index_images_s"] for r in rounds])
        table[backend] = row
    if "tensorflow" in table:
        for backend, row in table.items():
            for measure, cell in row.items():
                cell["ratio to TF"] = round(cell["median"] / table["tensorflow"][measure]["median"],
                                            2)
    return table


def markdown(table):
    measures = list(next(iter(table.values())))
    lines = ["| backend | " + " | ".join(measures) + " |",
             "| --- |" + " --- |" * len(measures)]
    for backend, row in table.items():
        cells = []
        for measure in measures:
            cell = row[measure]
            text = f"{cell['median']:.0f} [{cell['min']:.0f}-{cell['max']:.0f}]"
            if backend != "tensorflow" and "ratio to TF" in cell:
                text += f" ({cell['ratio to TF']:.2f}x)"
            cells.append(text)
        lines.append(f"| {backend} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True, help="a folder of class sub-folders")
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--classes-per-batch", type=int, help="default: the run's (C)")
    parser.add_argument("--samples-per-class", type=int, help="default: the run's (k)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--quick", action="store_true", help="a few steps at 32 px")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such folder")
    for flag in ("epochs", "steps_per_epoch", "rounds", "threads"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1, got "
                         f"{getattr(args, flag)}")
    results = {backend: [] for backend in args.backends}
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            order = random.Random(round_index).sample(args.backends, len(args.backends))
            for backend in order:
                folder = os.path.join(scratch, f"round{round_index}")
                os.makedirs(folder, exist_ok=True)
                results[backend].append(road(backend, args.data_dir, folder, args))
    table = summarize(results)
    print(f"{args.epochs} epochs x {args.steps_per_epoch} steps of cnn3 at {args.image_size} px, "
          f"colour photos from files ({args.data_dir}), {args.threads} thread(s), "
          f"{cpu_model()}, {args.rounds} round(s)")
    print(markdown(table))
    if args.json:
        write_json(args.json, {"command": command_line("benchmarks.own_images_road", argv),
                               "threads": args.threads, "cpu": cpu_model(),
                               "rounds": results, "table": table})
    return table


if __name__ == "__main__":
    main()
