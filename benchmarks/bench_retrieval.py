"""Exact retrieval evaluation: keras_dml against faiss and pytorch-metric-learning.

Part 1 (issue 7): 20,000 x 512 all-vs-all exact kNN, k = 101 neighbours including
the query itself (= 100 leave-one-out neighbours), timed in the same run for
keras_dml, faiss-cpu `IndexFlatIP`, the bare TensorFlow matmul and a naive chunked
`tf.matmul` + `tf.math.top_k`, repetitions interleaved, medians reported.

Part 2: the full metric computation (P@1, R-Precision, MAP@R) against
pytorch-metric-learning's `AccuracyCalculator` on the same data; the values must
agree.

Part 3 (`--sop`): an SOP-sized evaluation, 60,502 x 512 with 11,316 classes,
Recall@1/10/100/1000 and MAP@R, in a fresh process that reports the time and the
peak resident memory beyond the embeddings.

    python benchmarks/bench_retrieval.py [--repeats 5] [--sop]
"""

import argparse
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402  (sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads)
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_dml.evaluation import nearest_neighbors, retrieval_metrics  # noqa: E402


def clustered(n, d, num_classes, seed=0, spread=1.0):
    """Unit-norm embeddings around class centres; labels with uneven class sizes."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.arange(num_classes), rng.integers(0, num_classes, n - num_classes)])
    labels = rng.permutation(labels)
    centres = rng.normal(size=(num_classes, d)).astype("float32")
    x = centres[labels] + spread * rng.normal(size=(n, d)).astype("float32")
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels.astype("int64")


def naive_tf(x, k, chunk=2048):
    ref = tf.constant(x)

    @tf.function
    def step(q):
        return tf.math.top_k(tf.matmul(q, ref, transpose_b=True), k=k)

    def run():
        return [step(ref[s : s + chunk])[1].numpy() for s in range(0, len(x), chunk)]

    return run


def matmul_floor(x, chunk=2048):
    ref = tf.constant(x)

    @tf.function
    def step(q):
        return tf.reduce_max(tf.matmul(q, ref, transpose_b=True)[:, :1])

    def run():
        return [step(ref[s : s + chunk]).numpy() for s in range(0, len(x), chunk)]

    return run


def faiss_knn(x, k):
    import faiss

    def run():
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        return index.search(x, k)

    return run


def part_knn(repeats):
    n, d, k = 20000, 512, 101
    x, _ = clustered(n, d, 5000, spread=2.5)
    steps = {
        "keras_dml nearest_neighbors (leave-one-out, k=100)": lambda: nearest_neighbors(x, k=k - 1),
        "keras_dml nearest_neighbors (queries vs references, k=101)": (
            lambda: nearest_neighbors(x, x, k=k)
        ),
        "faiss IndexFlatIP (k=101)": faiss_knn(x, k),
        "TF matmul alone (chunks of 2048)": matmul_floor(x),
        "naive TF matmul + top_k (chunks of 2048)": naive_tf(x, k),
    }
    indices, _ = nearest_neighbors(x, k=k - 1)
    _, faiss_indices = steps["faiss IndexFlatIP (k=101)"]()
    self_first = faiss_indices[:, 0] == np.arange(n)
    agree = np.mean(indices[self_first] == faiss_indices[self_first, 1:])
    times = harness.median_times(steps, repeats=repeats, warmup=1)
    base = times["faiss IndexFlatIP (k=101)"]
    print(f"\n## Exact kNN, {n} x {d} all-vs-all, k = {k} (median of {repeats})\n")
    rows = [{"method": m, "time (s)": t, "ratio to faiss": t / base} for m, t in times.items()]
    harness.print_table(rows, ["method", "time (s)", "ratio to faiss"])
    print(f"\nneighbour lists identical to faiss's (self removed): {agree:.5f}")


def part_metrics(repeats):
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    n, d = 20000, 512
    x, labels = clustered(n, d, 5000, seed=1, spread=2.5)
    calculator = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count",
    )
    metrics = ("precision@1", "r_precision", "map@r")
    steps = {
        "keras_dml retrieval_metrics": lambda: retrieval_metrics(x, labels, metrics=metrics),
        "pytorch-metric-learning AccuracyCalculator (faiss)": (
            lambda: calculator.get_accuracy(x, labels)
        ),
    }
    ours = steps["keras_dml retrieval_metrics"]()
    theirs = steps["pytorch-metric-learning AccuracyCalculator (faiss)"]()
    times = harness.median_times(steps, repeats=repeats, warmup=1)
    base = times["pytorch-metric-learning AccuracyCalculator (faiss)"]
    print(f"\n## P@1, R-Precision, MAP@R, {n} x {d} leave-one-out (median of {repeats})\n")
    rows = [{"method": m, "time (s)": t, "ratio to PML": t / base} for m, t in times.items()]
    harness.print_table(rows, ["method", "time (s)", "ratio to PML"])
    pairs = zip(metrics, ("precision_at_1", "r_precision", "mean_average_precision_at_r"))
    print("\n| metric | keras_dml | PML |\n|---|---|---|")
    for ours_name, pml_name in pairs:
        print(f"| {ours_name} | {ours[ours_name]:.6f} | {theirs[pml_name]:.6f} |")


def _memory_kb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def part_sop():
    """Runs in its own process so that the peak-memory high-water mark is its own."""
    n, d, classes = 60502, 512, 11316
    x, labels = clustered(n, d, classes, seed=2, spread=2.5)
    retrieval_metrics(x[:2000], labels[:2000], ks=(1, 10, 100, 1000))  # load kernels
    baseline = _memory_kb("VmRSS")
    start = time.perf_counter()
    result = retrieval_metrics(x, labels, ks=(1, 10, 100, 1000), metrics=("recall@k", "map@r"))
    elapsed = time.perf_counter() - start
    peak = _memory_kb("VmHWM")
    print(f"\n## SOP-sized: {n} x {d}, {classes} classes, leave-one-out\n")
    print(f"time: {elapsed:.1f} s; peak RSS beyond embeddings and runtime: "
          f"{(peak - baseline) / 1024:.0f} MB (embeddings: {x.nbytes / 2**20:.0f} MB)")
    print({key: round(value, 4) for key, value in result.items()})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--sop", action="store_true", help="also run the SOP-sized evaluation")
    parser.add_argument("--sop-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sop_only:
        part_sop()
        return
    harness.limit_threads()
    print(f"load average at start: {os.getloadavg()}")
    part_knn(args.repeats)
    part_metrics(args.repeats)
    if args.sop:
        subprocess.run([sys.executable, __file__, "--sop-only"], check=True)
    print(f"\nload average at end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
