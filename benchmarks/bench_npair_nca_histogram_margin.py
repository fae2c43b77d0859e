"""NPair, NCA, Histogram and Margin + distance weighted sampling: keras_dml vs PML 2.9.

Forward + backward w.r.t. the embeddings for N in {180, 1024}, d = 512, C x 4
batches, timed in the same run (interleaved repetitions, medians) against
pytorch-metric-learning's NPairsLoss, NCALoss, HistogramLoss and
MarginLoss + DistanceWeightedMiner, and against the bare similarity matmul
(forward + backward), the floor of any pair loss.

Settings are matched where the definitions coincide: NCA(scale=2) on cosines is
PML's NCALoss (softmax_scale=1 on squared distances of normalised embeddings),
Histogram(bins=101) is HistogramLoss(n_bins=100), and
NPair(tuples="one_per_class", metric="cosine", l2_penalty=0) is NPairsLoss (N-pair-mc:
one pair per class, a C x C matrix); the script checks these values. "NPair all"
(the default: every anchor with each positive and all in-batch negatives, N x N) is
a larger problem than PML's and is shown for scale; Margin + DistanceWeighted are
random.

    python benchmarks/bench_npair_nca_histogram_margin.py [--repeats 15] [--sizes 180 1024]

PML is timed with the harness's thread count and with one thread (on a loaded
machine torch's OpenMP threads can be far slower than one thread); the ratio uses
the faster of the two. A peer taking more than 2 s per call (PML's HistogramLoss and MarginLoss +
DistanceWeightedMiner at N = 1024) is repeated 3 times instead, without warmup.
"""

import argparse
import time

import harness
import numpy as np

import keras_dml


def _peers(n):
    import torch
    from pytorch_metric_learning import losses, miners

    margin = losses.MarginLoss(margin=0.2, beta=1.2, learn_beta=True)
    return {
        "NPair-mc": (losses.NPairsLoss(), None),
        "NPair all": (losses.NPairsLoss(), None),
        "NCA": (losses.NCALoss(softmax_scale=1), None),
        "Histogram": (losses.HistogramLoss(n_bins=100), None),
        "Margin+DW": (margin, miners.DistanceWeightedMiner(cutoff=0.5, nonzero_loss_cutoff=1.4)),
    }, torch


def _ours():
    from keras_dml.losses import NCA, Histogram, Margin, NPair
    from keras_dml.mining import DistanceWeighted

    return {
        # PML's NPairsLoss is N-pair-mc on L2-normalised embeddings, without penalty
        "NPair-mc": lambda: NPair(l2_penalty=0.0, metric="cosine", tuples="one_per_class"),
        "NPair all": lambda: NPair(),
        "NCA": lambda: NCA(scale=2.0),
        "Histogram": lambda: Histogram(bins=101),
        "Margin+DW": lambda: Margin(miner=DistanceWeighted(seed=0)),
    }


def _check_values(name, ours, peer, x, y, torch):
    """PML and keras_dml agree where the definitions coincide."""
    if name not in ("NCA", "Histogram", "NPair-mc"):
        return ""
    mine = float(ours(y, x))
    theirs = float(peer(torch.tensor(x), torch.tensor(y, dtype=torch.long)))
    if not np.isclose(mine, theirs, rtol=1e-3, atol=1e-5):
        raise AssertionError(f"{name}: keras_dml {mine} != PML {theirs}")
    return f"{mine:.5g}"


def _repeats(step, repeats, slow_seconds=2.0, slow_repeats=3):
    """Fewer repetitions for a peer that takes many seconds per call (PML at N=1024)."""
    start = time.perf_counter()
    step()
    return (repeats, 3) if time.perf_counter() - start < slow_seconds else (slow_repeats, 0)


def _with_threads(torch, threads, step):
    def run():
        torch.set_num_threads(threads)
        return step()

    return run


def run(sizes, dim, repeats, names=None):
    threads = harness.limit_threads()
    rows = []
    for n in sizes:
        x, y = harness.batch(n, dim, samples_per_class=4, seed=n)
        peers, torch = _peers(n)
        for name, make in _ours().items():
            if names and name not in names:
                continue
            peer_loss, peer_miner = peers[name]
            checked = _check_values(name, make(), peer_loss, x, y, torch)
            pml = harness.torch_step(peer_loss, x, y, miner=peer_miner)
            steps = {
                "graph": harness.tf_step(make(), x, y, jit_compile=False),
                "xla": harness.tf_step(make(), x, y, jit_compile=True),
                "pml": _with_threads(torch, threads, pml),
                "pml 1 thread": _with_threads(torch, 1, pml),
                "matmul": harness.tf_matmul_floor(x, jit_compile=True),
            }
            count, warmup = _repeats(steps["pml 1 thread"], repeats)
            times = harness.median_times(steps, repeats=count, warmup=warmup)
            best = min(times["graph"], times["xla"])
            peer = min(times["pml"], times["pml 1 thread"])
            rows.append({
                "loss": name, "N": n,
                "keras_dml tf.function ms": 1e3 * times["graph"],
                "keras_dml XLA ms": 1e3 * times["xla"],
                f"PML {threads} threads ms": 1e3 * times["pml"],
                "PML 1 thread ms": 1e3 * times["pml 1 thread"],
                "best / best PML": best / peer,
                "best / matmul": best / times["matmul"],
                "matmul ms": 1e3 * times["matmul"],
                "repeats": count,
                "same value": checked,
            })
            print(rows[-1], flush=True)
    print()
    harness.print_table(rows, list(rows[0]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[180, 1024])
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--losses", nargs="+", choices=list(_ours()), default=None)
    args = parser.parse_args()
    print(f"keras_dml {getattr(keras_dml, '__version__', '?')}")
    run(args.sizes, args.dim, args.repeats, args.losses)


if __name__ == "__main__":
    main()
