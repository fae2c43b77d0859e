"""Issue-18 losses vs pytorch-metric-learning 2.9, each side in its own process.

    python benchmarks/bench_new_losses.py [--n 1024] [--dim 512] [--rounds 3] [--repeats 10]
    python benchmarks/bench_new_losses.py --quick          # small sizes, one round (tests)

One step is the loss value plus its gradient w.r.t. the embeddings (and the class
weights for the ArcFace family), on C x 4 labels. The driver starts one process per
(system, round), alternating keras_dml and PML so both see the same load; each
process limits TensorFlow and torch to the same thread count, warms up, times
`--repeats` steps and reports its median. The table shows the median over rounds,
the spread (min - max of the rounds' medians) and the ratio keras_dml / PML
(target <= 0.7). keras_dml's time is the faster of tf.function and XLA, measured in
the same process.

Peers: `ArcFaceLoss`, `CosFaceLoss`, `SubCenterArcFaceLoss` (C = N / 4 classes),
`CircleLoss`, `SupConLoss`, `NTXentLoss`, `SmoothAPLoss`. SmoothAP runs at N = 256:
PML builds N x N x N tensors (4.3 GB each at N = 1024, several per step), which this
machine cannot hold; keras_dml's form needs |P| N per anchor. MultipleNegativesRanking
has no PML class: its peer is the two-line torch form of sentence-transformers
(cross entropy of 20 cos(q_i, p_j) against j = i), on N pairs of d/2-wide halves.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

NAMES = ("ArcFace", "CosFace", "SubCenterArcFace", "Circle", "SupervisedContrastive",
         "NTXent", "SmoothAP", "MultipleNegativesRanking")
PROXY = ("ArcFace", "CosFace", "SubCenterArcFace")


def batch(n, dim, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, dim)).astype("float32"), (np.arange(n) // 4).astype("int64")


def _size(name, n):
    return min(n, 256) if name == "SmoothAP" else n


def ours(name, n, dim, repeats, threads):
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    from keras_dml import losses

    x, y = batch(n, dim)
    classes = n // 4
    loss = getattr(losses, name)(classes) if name in PROXY else getattr(losses, name)()
    if name == "MultipleNegativesRanking":
        y = np.arange(n)  # pair ids: every row is its own item
    xv, yv = tf.Variable(x), tf.constant(y.astype("int32"))
    results = {}
    for jit in (False, True):
        @tf.function(jit_compile=jit)
        def step():
            with tf.GradientTape() as tape:
                value = loss(yv, xv)
            sources = [xv] + ([loss.proxies] if name in PROXY else [])
            return value, [tf.convert_to_tensor(g) for g in tape.gradient(value, sources)]

        results["xla" if jit else "graph"] = _time(lambda: [t.numpy() for t in tf.nest.flatten(
            step())], repeats)
    return results


def theirs(name, n, dim, repeats, threads):
    import torch
    from pytorch_metric_learning import losses as pml

    torch.set_num_threads(threads)
    x, y = batch(n, dim)
    classes = n // 4
    if name == "MultipleNegativesRanking":
        def loss(e, _):
            q, p = e.chunk(2, dim=1)
            q, p = torch.nn.functional.normalize(q, dim=1), torch.nn.functional.normalize(p, dim=1)
            return torch.nn.functional.cross_entropy(20.0 * q @ p.T, torch.arange(len(e)))
    else:
        loss = {
            "ArcFace": lambda: pml.ArcFaceLoss(classes, dim),
            "CosFace": lambda: pml.CosFaceLoss(classes, dim),
            "SubCenterArcFace": lambda: pml.SubCenterArcFaceLoss(num_classes=classes,
                                                                 embedding_size=dim),
            "Circle": pml.CircleLoss, "SupervisedContrastive": pml.SupConLoss,
            "NTXent": pml.NTXentLoss, "SmoothAP": pml.SmoothAPLoss,
        }[name]()
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.tensor(y)
    params = list(loss.parameters()) if isinstance(loss, torch.nn.Module) else []

    def step():
        xt.grad = None
        for p in params:
            p.grad = None
        value = loss(xt, yt)
        value.backward()
        return value.item()

    return {"pml": _time(step, repeats)}


def _time(step, repeats, warmup=3):
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def worker(args):
    fn = ours if args.side == "ours" else theirs
    n = _size(args.loss, args.n)
    print(json.dumps(fn(args.loss, n, args.dim, args.repeats, args.threads)))


def drive(args):
    rows = []
    script = os.path.abspath(__file__)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    for name in args.losses:
        times = {}
        for _ in range(args.rounds):
            for side in ("ours", "pml"):
                out = subprocess.run(
                    [sys.executable, script, "--worker", side, "--loss", name, "--n",
                     str(args.n), "--dim", str(args.dim), "--repeats", str(args.repeats),
                     "--threads", str(args.threads)],
                    capture_output=True, text=True, env=env, check=True)
                for key, value in json.loads(out.stdout.strip().splitlines()[-1]).items():
                    times.setdefault(key, []).append(value)
        best = [min(g, x) for g, x in zip(times["graph"], times["xla"])]
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        ratio = statistics.median(best) / statistics.median(times["pml"])
        rows.append({
            "loss": name, "N": _size(name, args.n),
            "keras_dml graph ms": ms["graph"], "keras_dml XLA ms": ms["xla"],
            "PML ms": ms["pml"],
            "spread ours ms": f"{1e3 * min(best):.3g}-{1e3 * max(best):.3g}",
            "spread PML ms": f"{1e3 * min(times['pml']):.3g}-{1e3 * max(times['pml']):.3g}",
            "ratio": ratio,
        })
        print(rows[-1], flush=True)
    sys.path.insert(0, os.path.dirname(script))
    import harness

    print(f"\nload: {os.getloadavg()}; {args.threads} threads each side")
    harness.print_table(rows, list(rows[0]))
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--losses", nargs="+", choices=NAMES, default=list(NAMES))
    parser.add_argument("--quick", action="store_true", help="N = 64, d = 32, one round")
    parser.add_argument("--worker", choices=("ours", "pml"), dest="side", help=argparse.SUPPRESS)
    parser.add_argument("--loss", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.n, args.dim, args.rounds, args.repeats = 64, 32, 1, 2
    if args.side:
        worker(args)
    else:
        drive(args)


if __name__ == "__main__":
    main()
