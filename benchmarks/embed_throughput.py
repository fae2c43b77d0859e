"""Embedding throughput of image files on every backend: `keras-dml embed`'s loop, its
parts, and a plain-Keras twin, in images per second.

    python -m benchmarks.embed_throughput --data-dir .../CUB_200_2011/images

Each backend runs in its own worker process with the same thread count
(`benchmarks.processes`: warm-up, rounds interleaved in a fresh random order, median and
spread). For each network (by default cnn3 at 64 px and MobileNetV3Small at 128 px,
random weights, the embedder `keras-dml train` builds) and each part, one unit is one
pass over the same photos (the first `--images` of the folder as `keras-dml embed` lists
it, every n-th so that all classes take part):

- files: `keras_dml.inference.embed(embedder, paths, batch_size, preprocessing=...)`,
  the loop `keras-dml embed`, `index` and `evaluate` run (read, decode, resize, crop,
  forward pass, embeddings to NumPy);
- pipeline: the evaluation stream of those files alone, its batches to NumPy;
- forward: keras_dml's inference function (`keras_dml.inference.inference_function`)
  on the same decoded batches held in memory as NumPy arrays;
- predict: the plain-Keras twin, `embedder.predict` on the same decoded images in
  memory: what Keras alone costs on this backend.

The table gives images per second and the ratio to TensorFlow's, with the load average
(`os.getloadavg`) before and after each case.
"""

import argparse
import os
import statistics
import sys
import time

from benchmarks import processes
from benchmarks.__main__ import command_line, write_json

NETWORKS = {"cnn3": ("cnn3", 64), "MobileNetV3Small": ("MobileNetV3Small", 128)}
PARTS = ("files", "pipeline", "forward", "predict")
BACKENDS = ("tensorflow", "jax", "torch")
QUICK = {"images": 24, "batch_size": 8, "repeats": 1, "warmup": 0, "image_size": 32,
         "networks": ("cnn3",)}


def photos(data_dir, count):
    """`count` image files of `data_dir`, as `keras-dml embed` lists them (every n-th)."""
    from keras_dml.index.catalogue import list_images

    paths = list_images(data_dir).paths
    if count >= len(paths):
        return list(paths)
    return [paths[i * len(paths) // count] for i in range(count)]


def embedder_and_preprocessing(backbone, image_size):
    """`keras-dml train --backbone B --image-size N --weights none`'s embedder (random
    weights, seed 0) and the preprocessing its image files get."""
    import types

    from keras_dml.training import inputs
    from keras_dml.training.config import TrainConfig
    from keras_dml.training.model import build_model

    config = TrainConfig(dataset="folder", backbone=backbone, image_size=image_size,
                         weights="none", seed=0)
    files = types.SimpleNamespace(images=None)  # a split of image files
    shape, preprocessing = inputs.input_spec(files, image_size, config.backbone,
                                             config.augment_crop)
    return build_model(config, shape).embedder(), preprocessing


def _decoded(preprocessing, paths, batch_size):
    """The files' decoded, prepared batches as NumPy arrays (the stream of `embed`)."""
    import numpy as np

    from keras_dml.data.evaluation_stream import evaluation_stream
    from keras_dml.data.inputs import FILES, Data

    data = Data(FILES, list(paths), np.arange(len(paths), dtype=np.int64))
    return evaluation_stream(data, preprocessing, batch_size)


def unit(backend, part, backbone, image_size, data_dir, images, batch_size):
    """The worker's unit: one pass of `part` over the photos on `backend` (set before
    Keras is imported), and its facts (backend, threads, images, batches)."""
    os.environ["KERAS_BACKEND"] = backend
    import keras
    import numpy as np

    from keras_dml.inference import embed, inference_function

    if backend == "torch" and os.environ.get("BENCH_THREADS"):
        import torch

        torch.set_num_threads(int(os.environ["BENCH_THREADS"]))
    paths = photos(data_dir, images)
    model, preprocessing = embedder_and_preprocessing(backbone, image_size)
    stream = _decoded(preprocessing, paths, batch_size)
    if part == "files":
        def run():
            return embed(model, paths, batch_size, preprocessing=preprocessing).embeddings
    elif part == "pipeline":
        def run():
            return [np.asarray(x) for x, _ in stream]
    else:
        batches = [np.asarray(x) for x, _ in stream]
        if part == "forward":
            forward = inference_function(model)

            def run():
                return [keras.ops.convert_to_numpy(forward(x)) for x in batches]
        else:
            whole = np.concatenate(batches)

            def run():
                return model.predict(whole, batch_size=batch_size, verbose=0)
    run()  # builds, traces and compiles
    return run, {"backend": keras.backend.backend(), "images": len(paths),
                 "batch_size": batch_size, "threads": _threads(backend)}


def _threads(backend):
    """The forward pass's thread count on `backend` (torch: `torch.get_num_threads()`)."""
    if backend == "torch":
        import torch

        return torch.get_num_threads()
    return int(os.environ.get("BENCH_THREADS", "0")) or os.cpu_count()


def measure(data_dir, networks, parts, images, batch_size, repeats, warmup, threads,
            image_size=None):
    """{network: {part: {backend: {"images/s", "min", "max", "ratio to TF", ...}}}}, each
    case's backends interleaved in their own pooled workers, with the load around it."""
    pool = processes.Pool(threads)
    table = {}
    try:
        for network in networks:
            backbone, size = NETWORKS[network]
            size = image_size or size
            table[network] = {"image_size": size}
            for part in parts:
                kwargs = {"part": part, "backbone": backbone, "image_size": size,
                          "data_dir": data_dir, "images": images, "batch_size": batch_size}
                systems = {name: ("benchmarks.embed_throughput:unit", {"backend": name, **kwargs})
                           for name in BACKENDS}
                before = os.getloadavg()[0]
                result = processes.compare(systems, repeats, warmup, pool=pool)
                table[network][part] = _rates(result, images, before, os.getloadavg()[0])
                print(f"{network} {part}: " + ", ".join(
                    f"{name} {row['images/s']:.0f}" for name, row in
                    table[network][part].items() if isinstance(row, dict)), file=sys.stderr,
                    flush=True)
    finally:
        pool.close()
    return table


def _rates(result, images, load_before, load_after):
    """Images per second (median, min, max over the rounds) and the ratio to TensorFlow's
    (median of the per-round ratios) of one case."""
    count = {name: row["facts"]["images"] for name, row in result.items()}
    rates = {name: [count[name] / s for s in row["samples"]] for name, row in result.items()}
    reference = rates.get("tensorflow")
    rows = {}
    for name, values in rates.items():
        rows[name] = {"images/s": statistics.median(values), "min": min(values),
                      "max": max(values), "threads": result[name]["facts"]["threads"]}
        if reference:
            rows[name]["ratio to TF"] = statistics.median(
                a / b for a, b in zip(values, reference))
    return {**rows, "load": [round(load_before, 2), round(load_after, 2)]}


def markdown(table):
    """The figures as a Markdown table: network, part, then per backend images/s
    [min-max] and the ratio to TensorFlow."""
    lines = ["| network | part | " + " | ".join(BACKENDS) + " | load |",
             "| --- | --- | " + " | ".join("---" for _ in BACKENDS) + " | --- |"]
    for network, parts in table.items():
        for part, rows in parts.items():
            if part == "image_size":
                continue
            cells = []
            for name in BACKENDS:
                row = rows[name]
                cells.append(f"{row['images/s']:.0f} [{row['min']:.0f}-{row['max']:.0f}] "
                             f"({row['ratio to TF']:.2f}x)")
            lines.append(f"| {network} @ {parts['image_size']} px | {part} | "
                         + " | ".join(cells) + f" | {rows['load'][0]}-{rows['load'][1]} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.embed_throughput",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", required=True,
                        help="folder of images (root/<class>/<image>), as keras-dml embed takes")
    parser.add_argument("--networks", nargs="+", choices=sorted(NETWORKS),
                        default=list(NETWORKS))
    parser.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    parser.add_argument("--images", type=int, default=1024, help="photos per pass")
    parser.add_argument("--batch-size", type=int, default=64,
                        help="default 64, keras-dml embed's")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--warmup", type=int, default=1, help="untimed passes first")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true",
                        help=f"a smoke run: {QUICK['images']} images at "
                        f"{QUICK['image_size']} px, cnn3, one round")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if min(args.images, args.batch_size, args.repeats, args.threads) < 1 or args.warmup < 0:
        parser.error("--images, --batch-size, --repeats and --threads must be at least 1, "
                     "--warmup at least 0")
    if not os.path.isdir(args.data_dir):
        parser.error(f"--data-dir {args.data_dir}: no such folder")
    settings = dict(images=args.images, batch_size=args.batch_size, repeats=args.repeats,
                    warmup=args.warmup, networks=args.networks, image_size=None)
    if args.quick:
        settings.update(QUICK)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    table = measure(args.data_dir, settings.pop("networks"), args.parts,
                    threads=args.threads, **settings)
    info = {"command": command_line("benchmarks.embed_throughput", argv),
            "started": started, "threads": args.threads, **settings, "figures": table}
    print(markdown(table))
    if args.json:
        write_json(args.json, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
