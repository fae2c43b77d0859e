"""MultiSimilarity (with mining) and Contrastive vs pytorch-metric-learning, same run.

Forward + backward w.r.t. the embeddings, N in {180, 1024}, d = 512, C x 4 labels.
PML is timed with 2 torch threads and with 1 (torch's OpenMP threads contend
badly with any other load on 2 cores) and the faster is kept. Prints median times,
the ratio to PML (targets: MS <= 0.5x, Contrastive <= 0.7x)
and the ratio to the bare similarity matmul forward + backward (target at N = 1024:
within 1.5x).

    python benchmarks/bench_foundation.py [--repeats 15] [--jit]
"""

import argparse

from harness import batch, limit_threads, median_times, print_table, tf_matmul_floor, tf_step, torch_step

from keras_dml import losses


def pml_losses():
    from pytorch_metric_learning import distances, losses as pml, miners

    return {
        "MultiSimilarity+mining": (pml.MultiSimilarityLoss(alpha=2, beta=50, base=0.5),
                                   miners.MultiSimilarityMiner(epsilon=0.1)),
        "Contrastive": (pml.ContrastiveLoss(pos_margin=1, neg_margin=0.5,
                                            distance=distances.CosineSimilarity()), None),
    }


def ours():
    return {
        "MultiSimilarity+mining": losses.MultiSimilarity(),
        "Contrastive": losses.Contrastive(),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--jit", action="store_true", help="also time jit_compile=True")
    args = parser.parse_args()
    threads = limit_threads()
    rows = []
    for n in (180, 1024):
        x, y = batch(n, 512)
        for name, loss in ours().items():
            peer, miner = pml_losses()[name]
            steps = {"floor": tf_matmul_floor(x), "keras_dml": tf_step(loss, x, y),
                     "pml": torch_step(peer, x, y, miner),
                     "pml_1thread": torch_step(peer, x, y, miner, threads=1)}
            if args.jit:
                steps["keras_dml_jit"] = tf_step(loss, x, y, jit_compile=True)
            times = median_times(steps, repeats=args.repeats)
            floor = times["floor"]  # interleaved with the loss, so both see the same load
            best = min(v for k, v in times.items() if k.startswith("keras_dml"))
            times["pml"] = min(times["pml"], times.pop("pml_1thread"))
            rows.append({
                "loss": name, "N": n,
                "keras_dml ms": 1e3 * times["keras_dml"],
                **({"keras_dml jit ms": 1e3 * times["keras_dml_jit"]} if args.jit else {}),
                "PML ms": 1e3 * times["pml"], "matmul floor ms": 1e3 * floor,
                "ratio to PML": best / times["pml"], "ratio to floor": best / floor,
            })
    print(f"threads: {threads}")
    columns = ["loss", "N", "keras_dml ms"] + (["keras_dml jit ms"] if args.jit else []) + [
        "PML ms", "matmul floor ms", "ratio to PML", "ratio to floor"]
    print_table(rows, columns)


if __name__ == "__main__":
    main()
