"""Peak memory of `keras-dml index RUN --images DIR --uri DB` against the catalogue's size.

Generates catalogues of tiny PNG files (24 x 20 px, 10 class folders) under
`--scratch` (default /tmp, never the repository), a run whose embedder takes
16 px images to a 128-d embedding, then runs the command once per size in its
own process and reads that process's peak resident memory (`ru_maxrss` of the
waited child). With embedding and storing in chunks the peak should follow
the chunk size, not the number of files; what still grows with the catalogue
is the listing itself (a path per file) and the ids read back from the
collection, a few hundred bytes per file, and Milvus Lite's own loaded
segments (it keeps the collection's vectors in memory to search them).

    nice -n 10 python benchmarks/bench_catalogue_memory.py            # 20,000 and 200,000
    python benchmarks/bench_catalogue_memory.py --sizes 500,2000      # a quick look
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_png(seed, width=24, height=20):
    """A small RGB PNG's bytes (a seeded colour with noise), written without an image library."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    raw = b"".join(b"\x00" + row.tobytes() for row in pixels)

    def chunk(kind, data):
        return (len(data).to_bytes(4, "big") + kind + data
                + zlib.crc32(kind + data).to_bytes(4, "big"))

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def make_catalogue(folder, n, classes=10, variants=512):
    """`folder/c<k>/<i>.png`, n files (reused if already complete)."""
    marker = folder.rstrip(os.sep) + ".complete"
    if os.path.exists(marker):
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    images = [tiny_png(seed) for seed in range(variants)]
    for k in range(classes):
        os.makedirs(os.path.join(folder, f"c{k}"))
    for i in range(n):
        with open(os.path.join(folder, f"c{i % classes}", f"{i:07d}.png"), "wb") as f:
            f.write(images[i % variants])
    open(marker, "w").close()
    return folder


def make_run(folder):
    """A run directory with a small 16 px -> 128-d embedder and its preprocessing."""
    os.makedirs(folder, exist_ok=True)
    if os.path.exists(os.path.join(folder, "model.keras")):
        return folder
    import keras

    from keras_dml.data import Preprocessing
    from keras_dml.layers import EmbeddingHead
    from keras_dml.models import DMLModel

    keras.utils.set_random_seed(0)
    inputs = keras.Input((16, 16, 3))
    x = keras.layers.Conv2D(16, 3, activation="relu")(inputs)
    x = keras.layers.GlobalAveragePooling2D()(x)
    DMLModel(inputs, EmbeddingHead(128)(x)).save(os.path.join(folder, "model.keras"))
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"config": {"dataset": "folder"}, "export": {
            "input_format": "image_bytes",
            "preprocessing": Preprocessing(image_size=16, resize_size=20).to_dict()}}, f)
    return folder


def index_once(run, images, uri, chunk_size):
    """`(seconds, peak RSS MB, last stdout line)` of one `keras-dml index --uri` process."""
    shutil.rmtree(uri, ignore_errors=True)
    command = [sys.executable, "-m", "keras_dml.cli", "index", run, "--images", images,
               "--uri", uri, "--chunk-size", str(chunk_size)]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:
        raise RuntimeError("run the sizes from smallest to largest: ru_maxrss is the maximum "
                           "over all waited children")
    return seconds, peak / 1024, done.stdout.strip().splitlines()[-1]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,200000")
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--scratch", default="/tmp/keras_dml_catalogue_bench")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    os.makedirs(args.scratch, exist_ok=True)
    sys.path.insert(0, ROOT)
    run = make_run(os.path.join(args.scratch, "run"))
    print(f"chunk size {args.chunk_size}; load average {os.getloadavg()[0]:.2f} at start")
    print("| images | time (s) | images/s | peak RSS (MB) |\n|---:|---:|---:|---:|")
    for n in sizes:
        images = make_catalogue(os.path.join(args.scratch, f"images_{n}"), n)
        seconds, peak, line = index_once(run, images, os.path.join(args.scratch, f"db_{n}.db"),
                                         args.chunk_size)
        print(f"| {n:,} | {seconds:.0f} | {n / seconds:,.0f} | {peak:,.0f} |  <!-- {line} -->",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
