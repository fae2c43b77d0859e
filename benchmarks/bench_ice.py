"""InstanceCrossEntropy vs MultiSimilarity, forward + backward, in the same run.

    python benchmarks/bench_ice.py [--repeats 15] [--sizes 180 1024] [--k 4]

For each batch size N (d = 512, C x k labels), one step is the loss value plus its
gradient with respect to the embeddings. Rows:

- ICE / MS: `keras_dml.losses.InstanceCrossEntropy()` and
  `keras_dml.losses.MultiSimilarity()` (defaults, VTHM mining on), each as a
  `tf.function` step and as the same step with `jit_compile=True`;
- floor: the bare N x N similarity matmul forward + backward.

Ratios: ICE / MS per mode (the issue's target: <= 2) and ICE / floor. Repetitions
are interleaved and the medians reported, so a load spike hits every row alike.
"""

import argparse

import harness  # noqa: F401  (sets TF_CPP_MIN_LOG_LEVEL before TensorFlow loads)

from keras_dml import losses  # noqa: E402

DIM = 512


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[180, 1024])
    parser.add_argument("--k", type=int, default=4, help="samples per class")
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    threads = harness.limit_threads()
    rows = []
    for n in args.sizes:
        embeddings, labels = harness.batch(n, DIM, samples_per_class=args.k)
        steps = {"floor": harness.tf_matmul_floor(embeddings)}
        for jit in (False, True):
            mode = "xla" if jit else "graph"
            steps[f"ice_{mode}"] = harness.tf_step(losses.InstanceCrossEntropy(), embeddings,
                                                   labels, jit_compile=jit)
            steps[f"ms_{mode}"] = harness.tf_step(losses.MultiSimilarity(), embeddings, labels,
                                                  jit_compile=jit)
        times = harness.median_times(steps, repeats=args.repeats)
        for mode in ("graph", "xla"):
            ice, ms = times[f"ice_{mode}"], times[f"ms_{mode}"]
            rows.append({"N": n, "mode": mode, "ICE ms": 1e3 * ice, "MS ms": 1e3 * ms,
                         "floor ms": 1e3 * times["floor"], "ICE / MS": ice / ms,
                         "ICE / floor": ice / times["floor"]})
    print(f"d = {DIM}, k = {args.k}, {threads} threads, median of {args.repeats} interleaved "
          "repetitions")
    harness.print_table(rows, ["N", "mode", "ICE ms", "MS ms", "floor ms", "ICE / MS",
                               "ICE / floor"])


if __name__ == "__main__":
    main()
