"""Peak memory of `keras-dml index RUN --images DIR --uri DB` against the catalogue's size.

Generates catalogues of tiny PNG files (24 x 20 px, 10 class folders) under
`--scratch` (default /tmp, never the repository), a run whose embedder takes
16 px images to a 128-d embedding, then runs the command once per size in its
own process. A sampler thread reads `/proc/<pid>/status` (`VmHWM`, the peak
resident memory) of that process and of every process under it every
`--interval` seconds, so the embedding process and the Milvus Lite child that
serves the database (`keras_dml.index.lite_process`) are reported separately,
and neither includes this script. Then the database is reopened in a fresh
Lite child and its resident memory read once the collection is loaded: the
steady cost of the stored items, against the peak while inserting.

With embedding and storing in chunks the embedding process's peak follows the
chunk size, not the number of files (what still grows is the listing, a path
per file, and the ids read back, a few hundred bytes per file); the Lite
child holds the collection (its loaded segments) and grows with it.

    nice -n 10 python benchmarks/bench_catalogue_memory.py            # 20,000 and 200,000
    python benchmarks/bench_catalogue_memory.py --sizes 500,2000      # a quick look
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LITE_CHILD = "lite_process.py"  # how the Lite child's command line is recognised


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


def status_mb(pid, field):
    """`field` (e.g. "VmHWM", "VmRSS") of `/proc/<pid>/status` in MB, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def descendants(pid):
    """The ids of every live process under `pid`."""
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                with open(f"/proc/{parent}/task/{task}/children") as f:
                    children = [int(c) for c in f.read().split()]
            except OSError:
                continue
            found.extend(children)
            todo.extend(children)
    return found


def command_line(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class PeakSampler(threading.Thread):
    """Samples the peak resident memory (`VmHWM`) of a process and of its descendants.

    `peaks` maps each pid seen to `(its command line, its largest VmHWM in MB)`.
    A process's peak in its last `interval` seconds before exiting may be missed.
    """

    def __init__(self, pid, interval=0.2):
        super().__init__(daemon=True)
        self.pid, self.interval, self.peaks = pid, interval, {}
        self._done = threading.Event()

    def run(self):
        while not self._done.is_set():
            for pid in [self.pid, *descendants(self.pid)]:
                peak = status_mb(pid, "VmHWM")
                if peak is None:
                    continue
                name, seen = self.peaks.get(pid) or (command_line(pid), 0.0)
                self.peaks[pid] = (name, max(seen, peak))
            self._done.wait(self.interval)

    def stop(self):
        self._done.set()
        self.join()

    def peak(self, is_child):
        """The largest peak of the processes (other than the sampled one) `is_child` picks."""
        return max((peak for pid, (name, peak) in self.peaks.items()
                    if pid != self.pid and is_child(name)), default=None)


def environment():
    return {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "3"}


def index_once(run, images, uri, chunk_size, interval=0.2):
    """`(seconds, embedding process peak MB, Lite child peak MB, last stdout line)` of one
    `keras-dml index --uri` process (the child's peak None if it started none)."""
    shutil.rmtree(uri, ignore_errors=True)
    command = [sys.executable, "-m", "keras_dml.cli", "index", run, "--images", images,
               "--uri", uri, "--chunk-size", str(chunk_size)]
    start = time.perf_counter()
    process = subprocess.Popen(command, env=environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    sampler = PeakSampler(process.pid, interval)
    sampler.start()
    out, err = process.communicate()
    seconds = time.perf_counter() - start
    sampler.stop()
    if process.returncode:
        raise RuntimeError(err[-3000:])
    own = sampler.peaks[process.pid][1] if process.pid in sampler.peaks else None
    return seconds, own, sampler.peak(lambda name: LITE_CHILD in name), \
        out.strip().splitlines()[-1]


def reopened_rss(uri, collection="keras_dml"):
    """`(MB before, MB after)` loading the collection in a fresh Lite child: the resident
    memory of the stored items once nothing is being inserted."""
    sys.path.insert(0, ROOT)
    from pymilvus import MilvusClient

    from keras_dml.index.lite_process import LiteProcess
    from keras_dml.index.milvus import _locked

    server = LiteProcess(uri, _locked)
    try:
        before = status_mb(server.pid, "VmRSS")
        client = MilvusClient(uri=server.uri)
        client.load_collection(collection)
        after = status_mb(server.pid, "VmRSS")
        client.close()
    finally:
        server.stop()
    return before, after


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20000,200000")
    parser.add_argument("--chunk-size", type=int, default=2048)
    parser.add_argument("--scratch", default="/tmp/keras_dml_catalogue_bench")
    parser.add_argument("--interval", type=float, default=0.2,
                        help="seconds between memory samples")
    args = parser.parse_args(argv)
    sizes = sorted(int(s) for s in args.sizes.split(","))
    os.makedirs(args.scratch, exist_ok=True)
    sys.path.insert(0, ROOT)
    run = make_run(os.path.join(args.scratch, "run"))
    print(f"chunk size {args.chunk_size}; load average {os.getloadavg()[0]:.2f} at start")
    print("| images | time (s) | images/s | embedding process peak (MB) | Lite child peak (MB) "
          "| Lite child reopened (MB, empty -> loaded) |\n|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        images = make_catalogue(os.path.join(args.scratch, f"images_{n}"), n)
        uri = os.path.join(args.scratch, f"db_{n}.db")
        seconds, own, child, line = index_once(run, images, uri, args.chunk_size,
                                               args.interval)
        empty, loaded = reopened_rss(uri)
        print(f"| {n:,} | {seconds:.0f} | {n / seconds:,.0f} | {own:,.0f} | "
              f"{'-' if child is None else f'{child:,.0f}'} | {empty:,.0f} -> {loaded:,.0f} "
              f"|  <!-- {line}; load average {os.getloadavg()[0]:.2f} at end -->", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
