"""Pair and triplet losses: keras_dml against pytorch-metric-learning, forward + backward.

Run: python benchmarks/bench_pair_losses.py [--sizes 180 1024] [--dim 512] [--repeats 15]

For each batch size N (C x 4 labels, d = 512) every keras_dml loss is timed as a
compiled tf.function (graph) and with XLA (jit_compile=True), interleaved with the
pytorch-metric-learning 2.9 counterpart and with the bare similarity matmul
forward + backward (the floor of any pair loss; the faster of graph and XLA).
Medians of interleaved repeats; ratios < 1 mean keras_dml is faster. PML runs with
1 torch thread by default (`--torch-threads 1 2` times both and keeps its better
median): on the shared, loaded 2-core machine of this project, torch's OpenMP
threads were up to 100x slower with 2 threads than with 1 (ContrastiveLoss at
N=180: 1019 ms vs 11 ms), and the comparison should not profit from that.

The semantics differ where noted: PML's "semihard" TripletMarginMiner keeps every
triplet with d_ap < d_an < d_ap + margin, keras_dml's "semihard" is FaceNet's (the
closest negative beyond each positive, one per (anchor, positive)); both are the
libraries' semi-hard triplet training step.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness  # noqa: E402

import keras_dml  # noqa: E402
from keras_dml import losses  # noqa: E402


# PML's LiftedStructureLoss builds a (positive pairs x negative pairs) matrix:
# at N = 1024 (C x 4) that is 3072 x 1,044,480 floats = 12.8 GB, which the
# shared 23 GB machine cannot hold (the run was OOM-killed), so it is skipped there.
PML_MAX_N = {"LiftedStructure": 512}


def cases():
    """(name, keras_dml loss, PML factory returning (loss, miner or None), target ratio)."""
    from pytorch_metric_learning import distances, losses as pml, miners

    cosine = distances.CosineSimilarity()
    return [
        ("Triplet semihard", losses.Triplet(mining="semihard", margin=0.1),
         lambda: (pml.TripletMarginLoss(margin=0.1, distance=cosine),
                  miners.TripletMarginMiner(margin=0.1, type_of_triplets="semihard",
                                            distance=cosine)), 0.7),
        ("Triplet all", losses.Triplet(margin=0.1),
         lambda: (pml.TripletMarginLoss(margin=0.1, distance=cosine), None), 0.7),
        ("Triplet hard", losses.Triplet(mining="hard", margin=0.1),
         lambda: (pml.TripletMarginLoss(margin=0.1, distance=cosine),
                  miners.BatchHardMiner(distance=cosine)), 0.7),
        ("LiftedStructure", losses.LiftedStructure(),
         lambda: (pml.LiftedStructureLoss(neg_margin=1.0), None), 0.7),  # see PML_MAX_N
        ("GeneralizedLiftedStructure", losses.GeneralizedLiftedStructure(distance="euclidean"),
         lambda: (pml.GeneralizedLiftedStructureLoss(neg_margin=1.0, pos_margin=0.0), None),
         0.7),
        ("Contrastive (cosine)", losses.Contrastive(),
         lambda: (pml.ContrastiveLoss(pos_margin=1.0, neg_margin=0.5, distance=cosine), None),
         0.7),
        ("MultiSimilarity + VTHM", losses.MultiSimilarity(),
         lambda: (pml.MultiSimilarityLoss(alpha=2, beta=50, base=0.5),
                  miners.MultiSimilarityMiner(epsilon=0.1)), 0.5),
        ("BinomialDeviance", losses.BinomialDeviance(), None, None),
        ("BinLifted", losses.BinLifted(), None, None),
    ]


def _with_torch_threads(step, count):
    import torch

    def run():
        torch.set_num_threads(count)
        return step()

    return run


def _repeats(steps, repeats, budget):
    """Warm every step up once; fewer repeats when one call is slow (PML's O(N^3) paths)."""
    slowest = 0.0
    for step in steps.values():
        start = time.perf_counter()
        step()
        slowest = max(slowest, time.perf_counter() - start)
    return max(3, min(repeats, int(budget / max(slowest * len(steps), 1e-9))))


def run(sizes, dim, repeats, only=None, torch_threads=(1,), budget=60.0):
    threads = harness.limit_threads()
    print(f"keras_dml {keras_dml.__version__ if hasattr(keras_dml, '__version__') else ''} "
          f"vs pytorch-metric-learning, d={dim}, {threads} threads, median of {repeats}")
    rows = []
    for n in sizes:
        embeddings, labels = harness.batch(n, dim)
        floors = harness.median_times(
            {"graph": harness.tf_matmul_floor(embeddings),
             "xla": harness.tf_matmul_floor(embeddings, jit_compile=True)}, repeats=repeats)
        floor = min(floors.values())
        for name, loss, pml_factory, target in cases():
            if only and not any(word.lower() in name.lower() for word in only):
                continue
            steps = {
                "graph": harness.tf_step(loss, embeddings, labels),
                "xla": harness.tf_step(loss, embeddings, labels, jit_compile=True),
            }
            if n > PML_MAX_N.get(name, n):
                print(f"{name}, N={n}: PML skipped, it needs more memory than this machine has")
                pml_factory = None
            if pml_factory is not None:
                pml_loss, pml_miner = pml_factory()
                pml_step = harness.torch_step(pml_loss, embeddings, labels, pml_miner)
                for count in torch_threads:
                    steps[f"pml{count}"] = _with_torch_threads(pml_step, count)
            times = harness.median_times(steps, repeats=_repeats(steps, repeats, budget),
                                         warmup=0)
            pml_times = [times[f"pml{count}"] for count in torch_threads if f"pml{count}" in times]
            if pml_times:
                times["pml"] = min(pml_times)
            best = min(times["graph"], times["xla"])
            row = {"loss": name, "N": n, "graph ms": 1e3 * times["graph"],
                   "xla ms": 1e3 * times["xla"], "floor ms": 1e3 * floor,
                   "best / floor": best / floor}
            if "pml" in times:
                row.update({"PML ms": 1e3 * times["pml"],
                            "graph / PML": times["graph"] / times["pml"],
                            "xla / PML": times["xla"] / times["pml"],
                            "target": f"<= {target}",
                            "met": "yes" if best / times["pml"] <= target else "NO"})
            rows.append(row)
            print(row, flush=True)
    print()
    harness.print_table(rows, ["loss", "N", "graph ms", "xla ms", "PML ms", "graph / PML",
                               "xla / PML", "target", "met", "floor ms", "best / floor"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[180, 1024])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--torch-threads", type=int, nargs="+", default=[1],
                        help="PML is timed with each thread count and its best median kept")
    parser.add_argument("--budget", type=float, default=60.0,
                        help="seconds per loss and size; slow peers get fewer (>= 3) repeats")
    parser.add_argument("--only", nargs="*", help="substrings of the loss names to run")
    args = parser.parse_args()
    run(args.sizes, args.dim, args.repeats, args.only, tuple(args.torch_threads), args.budget)


if __name__ == "__main__":
    main()
