"""The C x k index stream against pytorch-metric-learning's `MPerClassSampler`, drawn an
epoch at a time (keras_dml's stream) and a batch at a time (its former one).

    python -m benchmarks.sampler_pace [--classes-per-batch 90 --samples-per-class 2]

One epoch of index batches on SOP-sized labels (59,551 samples, 11,318 classes), each
way in a worker process of its own (`tf_systems.sampler_epoch`, with and without
`per_batch`; `torch_systems.sampler_epoch`), 2 threads, `--repeats` interleaved rounds
of 3 calls after a warm-up. Prints each one's median [interquartile range] in ms and the
median [range] of its per-round ratio to PML's time and to the per-batch stream's.
"""

import argparse
import os
import statistics
import sys

from benchmarks import processes

SYSTEMS = {"keras_dml, an epoch at a time": ("benchmarks.tf_systems:sampler_epoch", {}),
           "keras_dml, a batch at a time": ("benchmarks.tf_systems:sampler_epoch",
                                            {"per_batch": True}),
           "PML MPerClassSampler": ("benchmarks.torch_systems:sampler_epoch", {})}


def _ratios(samples, to):
    ratios = [a / b for a, b in zip(samples, to)]
    return f"{statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]"


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sampler_pace",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--classes-per-batch", type=int, default=90)
    parser.add_argument("--samples-per-class", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args(argv)
    design = {"classes_per_batch": args.classes_per_batch,
              "samples_per_class": args.samples_per_class}
    load = os.getloadavg()
    results = processes.compare({name: (factory, {**kwargs, **design})
                                 for name, (factory, kwargs) in SYSTEMS.items()},
                                repeats=args.repeats, inner=3)
    print(f"{args.classes_per_batch} x {args.samples_per_class}, load average "
          f"{load[0]:.2f} at start, {os.getloadavg()[0]:.2f} at end")
    names = list(SYSTEMS)
    before, peer = results[names[1]]["samples"], results[names[2]]["samples"]
    for name, result in results.items():
        print(f"  {name:30s} {1e3 * result['median']:7.1f} ms [{1e3 * result['q1']:.1f}-"
              f"{1e3 * result['q3']:.1f}]  / PML {_ratios(result['samples'], peer)}  "
              f"/ a batch at a time {_ratios(result['samples'], before)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
