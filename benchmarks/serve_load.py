"""Load test of `keras-dml serve` beside the bare glue script, on a Milvus server.

In order, each step timed and skipped when its output is already in ``--workdir``:
the catalogue (``serve_load_catalogue``: the photos of ``--source`` and augmented
variants), a short training run, its ``keras-dml export``, a ``milvus-lite server`` on
127.0.0.1, ``keras-dml index --images ... --uri`` into it. Then, each system in its own
process on the same catalogue and machine:

- the floor: ``examples/serve_glue.py`` (SavedModel + pymilvus), one request at a time
  (``serve_load_floor``);
- ``keras-dml serve`` on 127.0.0.1 under locust (``serve_load_locustfile``), at each
  ``--clients`` level, closed loop, its resident memory sampled each second. At the
  ``--update-clients`` level new photos are written into the catalogue and
  ``keras-dml index --update`` adds them while the clients search; the new items are
  then looked up through the service, and removed again (files and entries) at the end.

Every level stops by itself after ``--seconds`` (plus ``--warmup``, left out of the
figures) or ``--max-requests`` measured requests. Writes ``serve_load.json`` (every
latency, the memory samples, the machine) and ``serve_load.md`` (the table) to
``--output``.

    python -m benchmarks.serve_load --source CUB_200_2011/images            # 100,000 items
    python -m benchmarks.serve_load --source DIR --quick                    # seconds a level
"""

import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import psutil

from benchmarks import serve_load_catalogue as catalogue
from benchmarks.__main__ import command_line
from benchmarks.serve_load_report import markdown, summarize, targets

__all__ = ["Service", "main", "parse_args"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCUSTFILE = os.path.join(ROOT, "benchmarks", "serve_load_locustfile.py")
COLLECTION = "bench_catalogue"


def parse_args(argv=None):
    """The command line, with ``--quick``'s defaults filled in."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", required=True,
                        help="photos in class folders (SOURCE/<class>/<image>)")
    parser.add_argument("--workdir", default=os.path.expanduser("~/.cache/keras_dml/serve_bench"),
                        help="catalogue, run, export and database (default %(default)s)")
    parser.add_argument("--output", default=None, help="results folder (default: --workdir)")
    parser.add_argument("--quick", action="store_true",
                        help="a 300-image catalogue, 6 s a level, 5 new photos")
    parser.add_argument("--count", type=int, default=None, help="catalogue images (100000)")
    parser.add_argument("--run", default=None, help="a train run to use instead of training")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--seconds", type=float, nargs="+", default=None,
                        help="measured seconds per level, one or one per --clients (600)")
    parser.add_argument("--floor-seconds", type=float, default=None,
                        help="measured seconds of the glue script (default: the longest level)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds left out (15)")
    parser.add_argument("--max-requests", type=int, default=200_000,
                        help="measured requests after which a level stops")
    parser.add_argument("--update-clients", type=int, default=8,
                        help="the level during which index --update runs (0: none)")
    parser.add_argument("--update-count", type=int, default=None, help="new photos (500)")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--serve-model", choices=("export", "run"), default="export",
                        help="give keras-dml serve the SavedModel (default) or the run")
    args = parser.parse_args(argv)
    quick = args.quick
    args.count = args.count or (300 if quick else 100_000)
    args.seconds = args.seconds or [6.0 if quick else 600.0]
    if len(args.seconds) == 1:
        args.seconds = args.seconds * len(args.clients)
    if len(args.seconds) != len(args.clients):
        parser.error(f"--seconds: {len(args.seconds)} values for {len(args.clients)} --clients")
    args.warmup = (3.0 if quick else 15.0) if args.warmup is None else args.warmup
    args.floor_seconds = args.floor_seconds or max(args.seconds)
    args.update_count = args.update_count or (5 if quick else 500)
    args.output = args.output or args.workdir
    return args


def _environment():
    return {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}


def _cli(*args):
    return [sys.executable, "-m", "keras_dml.cli", *map(str, args)]


def _timed(command, log, timeout=None):
    """Runs ``command`` from the repository root, its output in ``log``; the seconds."""
    command = [str(part) for part in command]
    start = time.perf_counter()
    with open(log, "a") as out:
        out.write(f"$ {' '.join(command)}\n")
        out.flush()
        done = subprocess.run(command, cwd=ROOT, env=_environment(), stdout=out,
                              stderr=subprocess.STDOUT, timeout=timeout)
    if done.returncode:
        with open(log) as out:
            tail = out.read()[-3000:]
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{tail}")
    return time.perf_counter() - start


def _free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def prepare(args, log):
    """The catalogue, run and export in the workdir; the seconds of the steps run."""
    steps = {}
    images = os.path.join(args.workdir, "catalogue")
    start = time.perf_counter()
    built = catalogue.build(args.source, images, args.count)
    steps["catalogue"] = time.perf_counter() - start
    run = args.run or os.path.join(args.workdir, "runs", "cub_cnn3")
    if not os.path.exists(os.path.join(run, "model.keras")):
        steps["train"] = _timed(_cli(
            "train", "--data-dir", args.source, "--epochs", 1, "--steps-per-epoch",
            2 if args.quick else 40, "--runs-dir", os.path.dirname(run), "--run-name",
            os.path.basename(run), "--no-export", "--no-plots", "--overwrite"), log)
    savedmodel = os.path.join(args.workdir, "savedmodels", os.path.basename(run), "1")
    if not os.path.exists(os.path.join(savedmodel, "saved_model.pb")):
        steps["export"] = _timed(_cli("export", run, os.path.dirname(savedmodel), "--version",
                                      1), log)
    return {"images": images, "count": len(built), "run": run, "savedmodel": savedmodel,
            "steps": steps}


def start_milvus(data_dir, log):
    """A ``milvus-lite server`` on a free loopback port: ``(process, uri)``."""
    port = _free_port()
    process = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir",
                                data_dir, "--host", "127.0.0.1", "--port", str(port)],
                               stdout=subprocess.PIPE, stderr=open(log, "a"), text=True)
    line = process.stdout.readline()
    if "listening" not in line:
        process.kill()
        raise RuntimeError(f"milvus-lite server did not start: {line!r}; see {log}")
    return process, f"http://127.0.0.1:{port}"


COUNT = """
import sys
from pymilvus import MilvusClient

uri, collection, flush = sys.argv[1:]
client = MilvusClient(uri)
if flush == "flush":
    client.flush(collection)
print(client.query(collection, filter="", output_fields=["count(*)"])[0]["count(*)"])
"""


def collection_count(uri, collection, flush=False):
    """The collection's rows, asked by pymilvus in a process of its own (after a
    ``flush`` if asked): a pymilvus connection left idle in this process gets its
    keep-alive pings refused by ``milvus-lite server`` (GOAWAY too_many_pings).

    ``flush`` seals the rows written since the last one into a segment: milvus-lite
    keeps them in memory and scans them in Python on every search, which at 100,000
    rows costs seconds a search.
    """
    done = subprocess.run([sys.executable, "-c", COUNT, uri, collection,
                           "flush" if flush else "count"], capture_output=True, text=True,
                          timeout=900)
    if done.returncode:
        raise RuntimeError(f"counting {collection} at {uri} failed: {done.stderr[-2000:]}")
    return int(done.stdout.split()[-1])


class Service:
    """``keras-dml serve`` in its own process on a loopback port, its RSS sampled."""

    def __init__(self, model, uri, collection, log, timeout=600):
        import httpx

        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        start = time.perf_counter()
        self.process = subprocess.Popen(
            _cli("serve", model, "--uri", uri, "--collection", collection, "--host",
                 "127.0.0.1", "--port", self.port), cwd=ROOT, env=_environment(),
            stdout=open(log, "a"), stderr=subprocess.STDOUT)
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"keras-dml serve exited ({self.process.returncode}); "
                                   f"see {log}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.perf_counter() - start > timeout:
                self.stop()
                raise RuntimeError(f"keras-dml serve not ready after {timeout} s; see {log}")
            time.sleep(0.25)
        self.ready_s = time.perf_counter() - start
        self.samples = []
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self):
        process = psutil.Process(self.process.pid)
        while not self._stop.wait(1.0):
            try:
                family = [process, *process.children(recursive=True)]
                rss = sum(member.memory_info().rss for member in family)
            except psutil.Error:
                return
            self.samples.append((time.time(), rss / 2**20))

    def rss_between(self, begin, end):
        """RSS samples (seconds from ``begin``, MB) taken between two wall times."""
        return [(t - begin, mb) for t, mb in self.samples if begin <= t <= end]

    def search(self, path, k):
        """The service's answer to one photo."""
        import httpx

        with open(path, "rb") as f:
            answer = httpx.post(f"{self.url}/search", params={"k": k}, timeout=60,
                                files={"image": (os.path.basename(path), f.read())})
        answer.raise_for_status()
        return answer.json()

    def batches(self):
        """The service's count of forward passes by batch size (``GET /stats``)."""
        import httpx

        answer = httpx.get(f"{self.url}/stats", timeout=30)
        return {int(size): count for size, count in answer.json()["batches"].items()}

    def stop(self):
        if hasattr(self, "_stop"):
            self._stop.set()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def write_queries(source, path, count=100):
    """A file naming ``count`` source photos spread over the classes, one a line."""
    photos = catalogue.source_photos(source)
    step = max(len(photos) // count, 1)
    with open(path, "w") as f:
        f.write("\n".join(photo for _, photo in photos[::step][:count]) + "\n")
    return path


def run_floor(setup, uri, queries, args, out, log):
    """The glue script's measurements (its own process), as ``summarize`` gives them."""
    _timed([sys.executable, "-m", "benchmarks.serve_load_floor", setup["savedmodel"], uri,
            COLLECTION, queries, "--out", out, "--warmup", args.warmup, "--duration",
            args.floor_seconds, "--max-requests", args.max_requests, "--k", args.k], log,
           timeout=args.warmup + args.floor_seconds + 900)
    with open(out) as f:
        measured = json.load(f)
    summary = summarize(measured, measured.pop("rss_mb"))
    summary.update(system="glue script", clients=1, ready_s=measured["ready_s"])
    return summary


class UpdateDuringLoad(threading.Thread):
    """Writes ``count`` new photos into the catalogue and runs ``keras-dml index --update``
    while a level runs, then asks the service for each new photo; ``result`` holds what
    happened, ``error`` what went wrong."""

    def __init__(self, setup, uri, service, args, log):
        super().__init__(daemon=True)
        self.setup, self.uri, self.service, self.args, self.log = setup, uri, service, args, log
        self.result, self.error, self.paths = None, None, []

    def _index(self):
        return _timed(_cli("index", self.setup["run"], "--images", self.setup["images"],
                           "--uri", self.uri, "--collection", COLLECTION, "--update"), self.log)

    def run(self):
        try:
            time.sleep(self.args.warmup + 1.0)
            photos = catalogue.source_photos(self.args.source)
            variant = int(np.ceil(self.setup["count"] / len(photos)))  # not in the catalogue
            step = max(len(photos) // self.args.update_count, 1)
            self.paths = catalogue.write_variants(photos[::step], self.setup["images"],
                                                  [variant], limit=self.args.update_count)
            before = collection_count(self.uri, COLLECTION)
            seconds = self._index()
            after = collection_count(self.uri, COLLECTION)
            checked = self.paths[:20]
            found = sum(self.service.search(path, 1)["results"][0]["id"]
                        == os.path.relpath(path, self.setup["images"]) for path in checked)
            self.result = {"clients": self.args.update_clients, "added": len(self.paths),
                           "count_before": before, "count_after": after,
                           "seconds": round(seconds, 1), "checked": len(checked),
                           "found": found}
        except Exception as error:  # reported with the results
            self.error = f"{type(error).__name__}: {error}"

    def remove(self):
        """Deletes the new photos and runs ``index --update`` again (not under load)."""
        for path in self.paths:
            if os.path.exists(path):
                os.remove(path)
        seconds = self._index()
        if self.result is not None:
            self.result.update(count_removed=collection_count(self.uri, COLLECTION),
                               remove_seconds=round(seconds, 1))


def run_level(service, clients, seconds, queries, args, out, log, updater=None):
    """One locust run of ``clients`` users against ``service``; with ``updater``, the
    run also lasts until the update and its checks are done."""
    extra = 900 if updater else 0
    command = [sys.executable, "-m", "locust", "-f", LOCUSTFILE, "--headless", "-u", clients,
               "-r", clients, "--run-time", f"{int(np.ceil(args.warmup + seconds + extra))}s",
               "--host", service.url, "--queries", queries, "--warmup", args.warmup,
               "--max-requests", args.max_requests, "--latencies-out", out, "--k", args.k,
               "--only-summary", "--loglevel", "WARNING", "--stop-timeout", "30"]
    begin = time.time() + args.warmup
    batches_before = service.batches()
    with open(log, "a") as output:
        output.write(f"$ {' '.join(map(str, command))}\n")
        output.flush()
        locust = subprocess.Popen(list(map(str, command)), cwd=ROOT, env=_environment(),
                                  stdout=output, stderr=subprocess.STDOUT)
        if updater:
            updater.start()
        while locust.poll() is None:
            time.sleep(0.5)
            if (updater and not updater.is_alive() and time.time() - begin >= seconds
                    and locust.poll() is None):
                locust.terminate()
                updater = None
        locust.wait()
    if not os.path.exists(out):
        raise RuntimeError(f"locust wrote no measurements ({locust.returncode}); see {log}")
    with open(out) as f:
        measured = json.load(f)
    summary = summarize(measured, service.rss_between(begin, time.time()))
    batches = {size: count - batches_before.get(size, 0)
               for size, count in service.batches().items()}
    runs = sum(batches.values())
    summary.update(system="keras-dml serve", clients=clients, mean_batch=round(
        sum(size * count for size, count in batches.items()) / runs, 2) if runs else None)
    return summary


def _machine():
    return {"cpus": os.cpu_count(), "platform": platform.platform(),
            "python": platform.python_version(), "load_average": os.getloadavg(),
            "memory_gb": round(psutil.virtual_memory().total / 2**30, 1)}


def measure(args, setup, log):
    """Index, the floor, the service's levels and the update: the report's runs."""
    milvus, uri = start_milvus(os.path.join(args.workdir, "milvus.db"), log)
    service, updater, runs = None, None, []
    queries = write_queries(args.source, os.path.join(args.workdir, "queries.txt"))
    try:
        setup["steps"]["index"] = _timed(_cli("index", setup["run"], "--images",
                                              setup["images"], "--uri", uri, "--collection",
                                              COLLECTION), log)
        start = time.perf_counter()
        setup["collection_count"] = collection_count(uri, COLLECTION, flush=True)
        setup["steps"]["flush"] = time.perf_counter() - start
        runs.append(run_floor(setup, uri, queries, args,
                              os.path.join(args.output, "floor.json"), log))
        model = setup["savedmodel"] if args.serve_model == "export" else setup["run"]
        service = Service(model, uri, COLLECTION, log)
        setup["steps"]["serve_ready"] = service.ready_s
        for clients, seconds in zip(args.clients, args.seconds):
            level = (UpdateDuringLoad(setup, uri, service, args, log)
                     if clients == args.update_clients else None)
            updater = level or updater
            runs.append(run_level(service, clients, seconds, queries, args,
                                  os.path.join(args.output, f"level_{clients}.json"), log,
                                  level))
        if updater:
            updater.join()
            updater.remove()
    finally:
        if service:
            service.stop()
        milvus.terminate()
        milvus.wait(timeout=60)
    update = updater and (updater.result or {"error": updater.error})
    return runs, update


def main(argv=None):
    """Runs every step and level; writes and returns the report."""
    args = parse_args(argv)
    os.makedirs(args.output, exist_ok=True)
    log = os.path.join(args.output, "serve_load.log")
    report = {"command": command_line("benchmarks.serve_load", argv),
        "started_utc": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": _machine()}
    setup = prepare(args, log)
    runs, update = measure(args, setup, log)
    report.update(runs=runs, update=update, targets=targets(runs), steps=setup["steps"],
                  collection_count=setup["collection_count"], catalogue=setup["images"],
                  load_average_end=os.getloadavg())
    with open(os.path.join(args.output, "serve_load.json"), "w") as f:
        json.dump(report, f, indent=1)
    table = markdown(report)
    with open(os.path.join(args.output, "serve_load.md"), "w") as f:
        f.write(table)
    print(table)
    return report


if __name__ == "__main__":
    main()
