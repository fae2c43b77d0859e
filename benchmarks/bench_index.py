"""Exact search of a large gallery: keras_dml `Index` vs faiss `IndexFlatIP`.

Each system runs in its own process with the same thread count on the same
seeded data (a unit-norm Gaussian gallery and queries): one warm-up search,
then `--repeats` timed searches of all queries (median and spread), and the
process's memory: resident set after the gallery is in place and its peak
(VmHWM) after searching, so `peak - ready` is what search adds. The parent
checks that both return the same neighbours.

    nice -n 10 python benchmarks/bench_index.py              # 1,000,000 x 128, 1,000 queries
    python benchmarks/bench_index.py --quick                 # 20,000 x 32, 100 queries
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def _memory_mb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _data(n, d, q, seed=0):
    """Unit-norm Gaussian gallery and queries, built in blocks (no full-size temporaries)."""
    rng = np.random.default_rng(seed)
    gallery = np.empty((n, d), np.float32)
    for start in range(0, n, 65536):
        block = rng.standard_normal((min(65536, n - start), d), dtype=np.float32)
        gallery[start:start + len(block)] = block / np.linalg.norm(block, axis=1, keepdims=True)
    queries = rng.standard_normal((q, d), dtype=np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return gallery, queries


def _worker(system, n, d, q, k, repeats, threads):
    gallery, queries = _data(n, d, q)
    if system == "keras_dml":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
        from keras_dml.index import Index

        index = Index(metric="cosine")
        index.add(gallery)
        del gallery

        def search():
            result = index.search(queries, k)
            return result.ids, result.scores
    else:
        import faiss

        faiss.omp_set_num_threads(threads)
        index = faiss.IndexFlatIP(d)
        index.add(gallery)
        del gallery

        def search():
            scores, ids = index.search(queries, k)
            return ids, scores
    ready = _memory_mb("VmRSS")
    ids, scores = search()  # warm-up (tracing, allocation)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        ids, scores = search()
        times.append(time.perf_counter() - start)
    return {"system": system, "seconds": times, "ready_mb": ready,
            "peak_mb": _memory_mb("VmHWM"), "ids": ids[:50].tolist()}


def _run(system, args):
    command = [sys.executable, __file__, "--worker", system, "--n", str(args.n), "--d",
               str(args.d), "--q", str(args.q), "--k", str(args.k), "--repeats",
               str(args.repeats), "--threads", str(args.threads)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20,000 x 32, 100 queries")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--d", type=int, default=128)
    parser.add_argument("--q", type=int, default=1000)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.d, args.q, args.repeats = 20_000, 32, 100, 2
    if args.worker:
        print(json.dumps(_worker(args.worker, args.n, args.d, args.q, args.k, args.repeats,
                                 args.threads)))
        return 0
    load = os.getloadavg()
    results = {system: _run(system, args) for system in ("keras_dml", "faiss")}
    same = results["keras_dml"]["ids"] == results["faiss"]["ids"]
    print(f"gallery {args.n} x {args.d} float32, {args.q} queries, k={args.k}, "
          f"{args.threads} threads, load average {load[0]:.2f}")
    for system, r in results.items():
        median = float(np.median(r["seconds"]))
        spread = max(r["seconds"]) - min(r["seconds"])
        print(f"{system:<10} search {median:7.3f} s (spread {spread:.3f}, {args.repeats} runs)"
              f"  memory ready {r['ready_mb']:7.0f} MB  peak {r['peak_mb']:7.0f} MB  "
              f"search adds {r['peak_mb'] - r['ready_mb']:6.0f} MB")
    ratio = np.median(results["keras_dml"]["seconds"]) / np.median(results["faiss"]["seconds"])
    print(f"time ratio keras_dml / faiss: {ratio:.2f}; same top-{args.k} ids on the first 50 "
          f"queries: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
