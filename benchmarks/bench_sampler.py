"""Class-balanced index sampling at SOP scale: keras_dml vs pytorch-metric-learning.

Labels: 59,551 samples over 11,318 classes (Stanford Online Products' train
split: 2 to 12 images per class, 5.26 on average), synthesised with the same
totals because SOP itself is not on this machine. Batch designs of the
papers: 90 classes x 2 (ICE on SOP) and 32 x 4.

Each step draws one epoch's worth of index batches (59,551 // (C*k)):
- keras_dml `ClassBalancedSampler.next_batch` (the NumPy sampler),
- keras_dml `class_balanced_batches` over in-memory (index, label) arrays
  (the sampler plus the tf.data machinery, no images; a fresh iterator per
  repetition, start-up included),
- pytorch-metric-learning `MPerClassSampler(labels, m=k, batch_size=C*k,
  length_before_new_iter=59,551)`, one `iter()`.
Repetitions are interleaved and medians reported (the CPU is shared).

Run: python benchmarks/bench_sampler.py [--repeats 7]
"""

import argparse
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import limit_threads, median_times, print_table  # noqa: E402

import numpy as np  # noqa: E402

NUM_SAMPLES, NUM_CLASSES, MIN_PER_CLASS, MAX_PER_CLASS = 59_551, 11_318, 2, 12


def sop_sized_labels(seed=0):
    """Skewed per-class counts in [2, 12] summing to 59,551 over 11,318 classes.

    Counts are 2 + a geometric draw (most classes small, a tail up to 12, as
    in SOP), then nudged one at a time to the exact total; labels shuffled.
    """
    rng = np.random.default_rng(seed)
    mean_extra = NUM_SAMPLES / NUM_CLASSES - MIN_PER_CLASS
    counts = MIN_PER_CLASS + rng.geometric(1 / (mean_extra + 1), NUM_CLASSES) - 1
    counts = np.clip(counts, MIN_PER_CLASS, MAX_PER_CLASS)
    while counts.sum() != NUM_SAMPLES:
        step = 1 if counts.sum() < NUM_SAMPLES else -1
        room = np.flatnonzero((counts + step >= MIN_PER_CLASS) & (counts + step <= MAX_PER_CLASS))
        fix = rng.choice(room, min(len(room), abs(NUM_SAMPLES - counts.sum())), replace=False)
        counts[fix] += step
    return rng.permutation(np.repeat(np.arange(NUM_CLASSES), counts))


def steps_for(labels, classes, k):
    import tensorflow as tf
    from pytorch_metric_learning.samplers import MPerClassSampler

    from keras_dml.data import ClassBalancedSampler, class_balanced_batches

    batch = classes * k
    num_batches = len(labels) // batch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = ClassBalancedSampler(labels, classes, k, seed=0)
        dataset = class_balanced_batches((np.arange(len(labels)), labels), classes, k,
                                         seed=0)
    peer = MPerClassSampler(labels, m=k, batch_size=batch, length_before_new_iter=len(labels))

    def keras_dml_numpy():
        for _ in range(num_batches):
            ours.next_batch()

    def keras_dml_tf_data():
        # A fresh iterator each time: includes start-up, and no prefetch buffer
        # filled while the other samplers were being timed.
        iterator = iter(dataset)
        for _ in range(num_batches):
            next(iterator)

    def pml():
        indices = list(iter(peer))
        assert len(indices) == num_batches * batch

    del tf
    return num_batches, {"keras_dml sampler": keras_dml_numpy,
                         "keras_dml tf.data": keras_dml_tf_data,
                         "pml MPerClassSampler": pml}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    threads = limit_threads()
    labels = sop_sized_labels()
    counts = np.bincount(labels)
    print(f"labels: {len(labels)} samples, {len(counts)} classes, per class "
          f"{counts.min()}-{counts.max()} (mean {counts.mean():.2f}); {threads} threads; "
          f"medians of {args.repeats} interleaved repetitions")
    rows = []
    for classes, k in ((90, 2), (32, 4)):
        num_batches, steps = steps_for(labels, classes, k)
        times = median_times(steps, repeats=args.repeats, warmup=1)
        peer = times["pml MPerClassSampler"]
        for name, seconds in times.items():
            rows.append({"design": f"{classes} x {k}", "sampler": name,
                         "batches/s": num_batches / seconds,
                         "ms/epoch": 1000 * seconds,
                         "speed vs pml": peer / seconds})
    print_table(rows, ["design", "sampler", "batches/s", "ms/epoch", "speed vs pml"])


if __name__ == "__main__":
    main()
