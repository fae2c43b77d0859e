"""The rule that chose the re-ranking defaults, applied to settings on validation tables.

Usage: python -m benchmarks.rerank_sweep CACHE.npz[:QUERIES_PER_CLASS] ... --methods SPEC ...
    [--max-lost 0.5]

Each CACHE is an embeddings file written by `python -m benchmarks.rerank RUN --cache
CACHE.npz` (a validation run's test split: `benchmarks.rerank_validation`), evaluated
leave-one-out and as a query/gallery division (each class's first QUERIES_PER_CLASS
images as queries, default 5). For each re-ranking SPEC ("dba:n=5,alpha=5", ...) it
prints the lowest ΔR@1 and ΔMAP@R over the tables, the largest share of queries whose
first result it turned from right to wrong, and its summed ΔMAP@R; a setting passes when
it lowers neither metric in any table and loses at most `--max-lost` % of first results
in each. Passing settings come first, by summed ΔMAP@R.
"""

import argparse

import numpy as np

from benchmarks.rerank import _division


def _tables(caches):
    """`(name, arrays)` of each cache's leave-one-out and query/gallery tables."""
    for spec in caches:
        path, _, per_class = spec.partition(":")
        with np.load(path) as saved:
            embeddings, labels = saved["embeddings"], saved["labels"]
        q = _division(labels, int(per_class or 5))
        yield f"{path} loo", (embeddings, labels)
        yield f"{path} qg", (embeddings[q], labels[q], embeddings[~q], labels[~q])


def _measure(arrays, method):
    """`(R@1, MAP@R, whether each query's first result is right)` with `method`."""
    from keras_dml.evaluation.query_gallery import retrieval_report

    report = retrieval_report(*arrays, ks=(1,), rerank=method)
    return report.metrics["recall@1"], report.metrics["map@r"], report.correct()[:, 0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("caches", nargs="+", help="CACHE.npz[:QUERIES_PER_CLASS]")
    parser.add_argument("--methods", nargs="+", required=True)
    parser.add_argument("--max-lost", type=float, default=0.5,
                        help="largest %% of first results a passing setting turns wrong")
    args = parser.parse_args()
    changes = {method: [] for method in args.methods}  # (ΔR@1, ΔMAP@R, lost %) per table
    for name, arrays in _tables(args.caches):
        recall, map_r, right = _measure(arrays, None)
        for method in args.methods:
            r, m, now = _measure(arrays, method)
            changes[method].append((100 * (r - recall), 100 * (m - map_r),
                                    100 * np.mean(right & ~now)))
        print(f"measured: {name}", flush=True)
    rows = []
    for method, values in changes.items():
        worst_r1, worst_map, lost = (min(v[0] for v in values), min(v[1] for v in values),
                                     max(v[2] for v in values))
        passes = worst_r1 >= 0 and worst_map >= 0 and lost <= args.max_lost
        rows.append((not passes, -sum(v[1] for v in values), method, worst_r1, worst_map,
                     lost))
    print("\n| re-ranking | passes | lowest ΔR@1 | lowest ΔMAP@R | most first results lost (%) "
          "| summed ΔMAP@R |")
    print("|---|---|---|---|---|---|")
    for fails, minus_gain, method, worst_r1, worst_map, lost in sorted(rows):
        print(f"| {method} | {'no' if fails else 'yes'} | {worst_r1:+.2f} | {worst_map:+.2f} | "
              f"{lost:.2f} | {-minus_gain:+.2f} |")


if __name__ == "__main__":
    main()
