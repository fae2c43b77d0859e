"""Cross-batch memory: one training step of keras_dml vs pytorch-metric-learning.

A step = enqueue a batch of N embeddings into a full memory of M entries, the
MultiSimilarity loss of the batch against the memory (mining off on both sides)
and its gradient w.r.t. the batch. Each (system, M, d) runs in its own process
with the same intra-op thread count; after a warm-up, `--repeats` steps are timed
and the median and the spread (min-max) reported, with two memory figures: the
process's peak RSS above its RSS before the memory was built ("total": the memory
itself, graph tracing and allocator pools included), and the peak of the timed
steps above the RSS just before them ("a step": what a training step adds once
everything is built; the peak is reset through /proc/self/clear_refs).

    nice -n 10 python benchmarks/bench_cross_batch_memory.py            # full grid
    python benchmarks/bench_cross_batch_memory.py --quick               # one small cell
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks.worker import memory_kb, reset_peak  # noqa: E402

N = 128


def _rss_mb():
    return memory_kb("VmRSS") / 1024


def _peak_mb():
    return memory_kb("VmHWM") / 1024


def _batches(count, d, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(N, d)).astype("float32"),
             rng.integers(0, 1000, N).astype("int64")) for _ in range(count)]


def keras_dml_step(memory, d, threads):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    from keras_dml import losses

    loss = losses.CrossBatchMemory(losses.MultiSimilarity(miner=None), memory_size=memory)
    batches = [(tf.constant(x), tf.constant(y.astype("int32"))) for x, y in
               _batches(8, d)]

    loss(batches[0][1], batches[0][0])  # builds the memory, then fill it as after M / N steps
    bank = loss.memory
    rng = np.random.default_rng(1)
    bank.embeddings.assign(rng.normal(size=(memory, d)).astype("float32"))
    bank.labels.assign(rng.integers(0, 1000, memory).astype("int32"))
    bank.filled.assign(memory)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = loss(y, x)
        return value, tape.gradient(value, x)

    def run(i):
        value, grad = step(*batches[i % len(batches)])
        grad.numpy()

    return run


def pml_step(memory, d, threads):
    import numpy as np
    import torch
    from pytorch_metric_learning import losses

    torch.set_num_threads(threads)
    loss = losses.CrossBatchMemory(losses.MultiSimilarityLoss(), d, memory_size=memory)
    batches = [(torch.tensor(x), torch.tensor(y)) for x, y in _batches(8, d)]
    rng = np.random.default_rng(1)  # a full memory, as after M / N steps
    loss.embedding_memory[:] = torch.tensor(rng.normal(size=(memory, d)).astype("float32"))
    loss.label_memory[:] = torch.tensor(rng.integers(0, 1000, memory))
    loss.has_been_filled = True

    def run(i):
        x, y = batches[i % len(batches)]
        x = x.clone().requires_grad_(True)
        loss(x, y).backward()

    return run


def worker(system, memory, d, repeats, threads):
    if system == "keras_dml":
        import keras_dml.losses  # noqa: F401  (imports before the baseline)
    else:
        import pytorch_metric_learning.losses  # noqa: F401
    baseline = _rss_mb()
    step = (keras_dml_step if system == "keras_dml" else pml_step)(memory, d, threads)
    fill = 3  # warm-up steps
    for i in range(fill):
        step(i)
    total_peak = _peak_mb() - baseline
    before_steps = _rss_mb() if reset_peak() else None
    times = []
    for i in range(repeats):
        start = time.perf_counter()
        step(fill + i)
        times.append(time.perf_counter() - start)
    step_peak = None if before_steps is None else _peak_mb() - before_steps
    return {"system": system, "memory": memory, "d": d,
            "median_ms": 1e3 * statistics.median(times),
            "min_ms": 1e3 * min(times), "max_ms": 1e3 * max(times),
            "peak_mb": max(total_peak, _peak_mb() - baseline), "step_mb": step_peak}


def _mb(value):
    return "n/a" if value is None else f"{value:.0f}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="memory 1024, d 64, 3 repeats")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--worker", nargs=3, metavar=("SYSTEM", "MEMORY", "D"))
    args = parser.parse_args(argv)
    if args.worker:
        system, memory, d = args.worker
        print(json.dumps(worker(system, int(memory), int(d), args.repeats, args.threads)))
        return 0
    grid = [(1024, 64)] if args.quick else [(8192, 128), (8192, 512), (65536, 128),
                                            (65536, 512)]
    repeats = 3 if args.quick else args.repeats
    rows = []
    for memory, d in grid:
        cell = {}
        for system in ("keras_dml", "pml"):
            out = subprocess.run(
                [sys.executable, __file__, "--worker", system, str(memory), str(d),
                 "--repeats", str(repeats), "--threads", str(args.threads)],
                check=True, capture_output=True, text=True,
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
            cell[system] = json.loads(out.stdout.strip().splitlines()[-1])
        ours, theirs = cell["keras_dml"], cell["pml"]
        rows.append(ours | {"pml_median_ms": theirs["median_ms"],
                            "pml_peak_mb": theirs["peak_mb"],
                            "pml_step_mb": theirs["step_mb"],
                            "time_ratio": ours["median_ms"] / theirs["median_ms"]})
    print(f"N={N}, {args.threads} threads, {repeats} timed steps, load {os.getloadavg()[0]:.1f}")
    print("| memory | d | keras_dml ms (min-max) | PML ms | time ratio | MB total, keras_dml "
          "/ PML | MB a step, keras_dml / PML |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['memory']} | {r['d']} | {r['median_ms']:.1f} ({r['min_ms']:.1f}-"
              f"{r['max_ms']:.1f}) | {r['pml_median_ms']:.1f} | {r['time_ratio']:.2f} | "
              f"{r['peak_mb']:.0f} / {r['pml_peak_mb']:.0f} | {_mb(r['step_mb'])} / "
              f"{_mb(r['pml_step_mb'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
