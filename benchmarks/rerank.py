"""Re-ranking gains on a run's test split: R@1, MAP@R and mAP with each method, and the
extra time, leave-one-out and on a query/gallery division of the same split.

Usage: python -m benchmarks.rerank RUN [--methods qe dba k_reciprocal ...]
    [--queries-per-class 5] [--cache FILE.npz]

The query/gallery division takes each class's first `--queries-per-class` images as
queries and the rest as the gallery. Prints one markdown table per protocol.
"""

import argparse
import time

import numpy as np

DEFAULT_METHODS = ("qe", "qe:n=2,mutual=0", "dba", "dba:keep=0",
                   "k_reciprocal", "k_reciprocal:k2=6,keep=0")  # defaults, papers' settings


def _division(labels, per_class):
    seen = {}
    is_query = np.zeros(len(labels), bool)
    for i, label in enumerate(labels.tolist()):
        seen[label] = seen.get(label, 0) + 1
        is_query[i] = seen[label] <= per_class
    return is_query


def _table(title, arrays, methods):
    from keras_dml.evaluation.query_gallery import retrieval_report

    print(f"\n### {title}\n")
    print("| re-ranking | R@1 | MAP@R | mAP | time (s) | ΔR@1 | ΔMAP@R | first results "
          "right→wrong / wrong→right |")
    print("|---|---|---|---|---|---|---|---|")
    base = base_right = None
    for method in (None, *methods):
        started = time.perf_counter()
        report = retrieval_report(*arrays, ks=(1,), rerank=method)
        seconds = time.perf_counter() - started
        metrics, right = report.metrics, report.correct()[:, 0]
        if base is None:
            base, base_right = metrics, right
        print(f"| {method or 'none'} | {100 * metrics['recall@1']:.2f} | "
              f"{100 * metrics['map@r']:.2f} | {100 * metrics['map']:.2f} | {seconds:.1f} | "
              f"{100 * (metrics['recall@1'] - base['recall@1']):+.2f} | "
              f"{100 * (metrics['map@r'] - base['map@r']):+.2f} | "
              f"{np.sum(base_right & ~right)} / {np.sum(~base_right & right)} of {len(right)} |",
              flush=True)


def _embeddings(run_dir, cache=None):
    """The run's test split embedded (and saved to / read from `cache`)."""
    import os

    if cache and os.path.exists(cache):
        with np.load(cache) as saved:
            return saved["embeddings"], saved["labels"]
    from keras_dml.cli.parser import load_tensorflow

    load_tensorflow()
    from keras_dml.index.runs import embed_split, load_run, load_split

    run = load_run(run_dir)
    embedded = embed_split(run, load_split(run), progress=False)
    embeddings, labels = embedded.embeddings, embedded.labels
    if cache:
        np.savez(cache, embeddings=embeddings, labels=labels)
    return embeddings, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS)
    parser.add_argument("--queries-per-class", type=int, default=5)
    parser.add_argument("--protocols", nargs="+", default=("loo", "qg"), choices=("loo", "qg"),
                        help="leave-one-out and/or the query/gallery division")
    parser.add_argument("--cache", help="npz file of the test split's embeddings: read if it "
                        "exists, else written (sweeps then skip the embedding)")
    args = parser.parse_args()
    embeddings, labels = _embeddings(args.run, args.cache)
    print(f"{args.run}: {len(labels)} test images, {len(np.unique(labels))} classes")
    if "loo" in args.protocols:
        _table("leave-one-out", (embeddings, labels), args.methods)
    if "qg" not in args.protocols:
        return
    q = _division(labels, args.queries_per_class)
    _table(f"query/gallery: first {args.queries_per_class} images of each class as queries "
           f"({q.sum()}), the rest as gallery ({(~q).sum()})",
           (embeddings[q], labels[q], embeddings[~q], labels[~q]), args.methods)


if __name__ == "__main__":
    main()
