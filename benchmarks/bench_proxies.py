"""Proxy losses vs pytorch-metric-learning 2.9, forward + backward, in the same run.

    python benchmarks/bench_proxies.py [--repeats 7] [--sizes 180x100,1024x11318]

For each loss and each (N, C), with d = 512 and C x k labels, one step is the loss
value plus its gradients with respect to the embeddings AND the proxies (what a
training step needs; PML's backward fills both too). Columns:

- keras_dml: `tf.function` step; keras_dml_xla: the same with `jit_compile=True`;
- pml: the pytorch-metric-learning loss with the same hyperparameters;
- floor: the bare N x (C K) similarity matmul forward + backward w.r.t. both
  operands in TensorFlow, the lower bound of any proxy loss;
- ratios: best keras_dml time / pml (target <= 0.7) and / floor (target <= 2).

Proxy NCA: PML's softmax includes the positive proxy in the denominator, the paper
(and keras_dml) excludes it; the work is the same. SoftTriple: keras_dml also
computes the centre regulariser (PML omits it), a per-class K x K Gram of the
centres (C K^2 d work, batched small matmuls that CPUs run slowly);
"SoftTripleNoReg" (tau = 0) is the like-for-like comparison with PML.
"""

import argparse

import numpy as np

import harness  # noqa: F401  (sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads)
import tensorflow as tf  # noqa: E402

from keras_dml import losses  # noqa: E402

DIM = 512
SOFT_TRIPLE_K = 10
SIZES = ((180, 100), (180, 11318), (1024, 100), (1024, 11318))


def ours(name, classes):
    return {
        "ProxyAnchor": lambda: losses.ProxyAnchor(classes),
        "ProxyNCA": lambda: losses.ProxyNCA(classes),
        "SoftTriple": lambda: losses.SoftTriple(classes, centers_per_class=SOFT_TRIPLE_K),
        "SoftTripleNoReg": lambda: losses.SoftTriple(classes, centers_per_class=SOFT_TRIPLE_K,
                                                     tau=0.0),
        "NormalizedSoftmax": lambda: losses.NormalizedSoftmax(classes),
    }[name]()


def theirs(name, classes):
    from pytorch_metric_learning import losses as pml

    name = "SoftTriple" if name == "SoftTripleNoReg" else name
    return {
        "ProxyAnchor": lambda: pml.ProxyAnchorLoss(classes, DIM, margin=0.1, alpha=32),
        "ProxyNCA": lambda: pml.ProxyNCALoss(classes, DIM),
        "SoftTriple": lambda: pml.SoftTripleLoss(classes, DIM,
                                                 centers_per_class=SOFT_TRIPLE_K, la=20,
                                                 gamma=0.1, margin=0.01),
        "NormalizedSoftmax": lambda: pml.NormalizedSoftmaxLoss(classes, DIM,
                                                               temperature=0.05),
    }[name]()


def keras_dml_step(loss, embeddings, labels, jit_compile):
    x = tf.Variable(embeddings)
    y = tf.constant(labels)
    loss.trainable_layer.build((None, DIM))
    variables = [x, loss.proxies]

    @tf.function(jit_compile=jit_compile)
    def step():
        with tf.GradientTape() as tape:
            value = loss(y, x)
        return [value] + tape.gradient(value, variables)

    return lambda: [t.numpy() for t in step()]


def floor_step(embeddings, keys):
    x, k = tf.Variable(embeddings), tf.Variable(keys)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            value = tf.reduce_sum(tf.matmul(x, k, transpose_b=True))
        return [value] + tape.gradient(value, [x, k])

    return lambda: [t.numpy() for t in step()]


def pml_step(loss, embeddings, labels):
    step = harness.torch_step(loss, embeddings, labels)

    def with_proxy_grads():
        for p in loss.parameters():
            p.grad = None
        return step()

    return with_proxy_grads


def run(names, sizes, repeats):
    rows = []
    for n, classes in sizes:
        embeddings, _ = harness.batch(n, DIM)
        labels = ((np.arange(n) // 4) % classes).astype("int32")
        for name in names:
            keys = np.random.default_rng(1).normal(
                size=(classes * (SOFT_TRIPLE_K if name.startswith("SoftTriple") else 1), DIM)
            ).astype("float32")
            steps = {
                "keras_dml": keras_dml_step(ours(name, classes), embeddings, labels, False),
                "keras_dml_xla": keras_dml_step(ours(name, classes), embeddings, labels, True),
                "pml": pml_step(theirs(name, classes), embeddings, labels),
                "floor": floor_step(embeddings, keys),
            }
            times = harness.median_times(steps, repeats=repeats, warmup=2)
            best = min(times["keras_dml"], times["keras_dml_xla"])
            row = {"loss": name, "N": n, "C": classes}
            row.update({key: 1000 * value for key, value in times.items()})
            row["best/pml"] = best / times["pml"]
            row["best/floor"] = best / times["floor"]
            rows.append(row)
            print(row, flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--losses", default="ProxyAnchor,ProxyNCA,SoftTriple,NormalizedSoftmax")
    parser.add_argument("--sizes", default=",".join(f"{n}x{c}" for n, c in SIZES),
                        help="comma-separated NxC")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra-op threads of BOTH TensorFlow and torch; 0 = harness "
                             "default (all cores). Use 1 on a machine loaded by other jobs: "
                             "torch's OpenMP threads spin-wait badly when oversubscribed.")
    args = parser.parse_args()
    sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
    threads = harness.limit_threads()
    if args.threads:
        import torch

        threads = args.threads
        torch.set_num_threads(threads)
        tf.config.threading.set_intra_op_parallelism_threads(threads)
    print(f"d = {DIM}, {threads} threads, median of {args.repeats} interleaved repeats; "
          "times in ms (forward + backward w.r.t. embeddings and proxies)")
    rows = run(args.losses.split(","), sizes, args.repeats)
    harness.print_table(rows, ["loss", "N", "C", "keras_dml", "keras_dml_xla", "pml", "floor",
                               "best/pml", "best/floor"])


if __name__ == "__main__":
    main()
