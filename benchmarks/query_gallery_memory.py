"""Peak memory of `retrieval_report` on a 1,000,000 x 128 gallery, searched in chunks.

Usage: python -m benchmarks.query_gallery_memory [--gallery 1000000] [--queries 2000]

Prints the gallery's own size, the process' peak resident memory (ru_maxrss) before
and after the evaluation, and the time. The gallery is random float32 with 1,000
classes; the queries are noisy copies of gallery items.
"""

import argparse
import resource
import time

import numpy as np


def _peak_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gallery", type=int, default=1_000_000)
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()
    from keras_dml.evaluation.query_gallery import retrieval_report

    rng = np.random.default_rng(0)
    gallery = np.empty((args.gallery, args.dim), np.float32)
    for start in range(0, args.gallery, 100_000):  # without a float64 temporary
        stop = min(start + 100_000, args.gallery)
        gallery[start:stop] = rng.standard_normal((stop - start, args.dim), np.float32)
    labels = np.arange(args.gallery) % 1000
    picked = rng.choice(args.gallery, args.queries, replace=False)
    queries = gallery[picked] + 0.5 * rng.standard_normal((args.queries, args.dim), np.float32)
    before = _peak_mb()
    started = time.perf_counter()
    report = retrieval_report(queries, labels[picked], gallery, labels, ks=(1, 10))
    seconds = time.perf_counter() - started
    print(f"gallery {args.gallery} x {args.dim} float32: {gallery.nbytes / 2**20:.0f} MB; "
          f"{args.queries} queries")
    print(f"peak RSS before evaluation {before:.0f} MB, after {_peak_mb():.0f} MB "
          f"(+{_peak_mb() - before:.0f} MB); {seconds:.1f} s")
    print({k: round(v, 4) if isinstance(v, float) else v for k, v in report.metrics.items()})


if __name__ == "__main__":
    main()
