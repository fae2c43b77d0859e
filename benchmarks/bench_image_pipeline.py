"""Images per second of the class-balanced CUB pipeline, and whether it keeps up.

Source: the CUB-200-2011 subset in ../shared/datasets (train classes 1-50,
2,949 JPEGs of 227x227). Preprocessing as in ICE section 4.1: resize to
256x256, random 224 crop, horizontal flip. Batches of C=6 classes x k=10
(ICE on CUB). Three pipelines, timed in the same run, repetitions
interleaved, medians:
- keras_dml `class_balanced_batches` (read + decode + augment per batch in
  parallel `map` calls, AUTOTUNE, prefetch),
- a plain tf.data baseline with the same decode + augment per element
  (`from_tensor_slices(paths).shuffle().map(AUTOTUNE).batch(60)`), which
  is not class-balanced: the ceiling of tf.data decoding here,
- the decode-free ceiling of the training step: the same training step on
  one cached batch.
Then `fit` of the example backbone (the CLI's "convnet" + EmbeddingHead(64),
MultiSimilarity) for a few steps fed by the pipeline versus fed by a cached
batch: if the ratio is near 1 the pipeline keeps up with training.

Run: python benchmarks/bench_image_pipeline.py [--batches 30] [--train-steps 3] [--repeats 3]
     [--skip-fit]
"""

import argparse
import os
import warnings
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import limit_threads, print_table  # noqa: E402


CUB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                   "datasets", "cub200_subset")
C, K = 6, 10


def pipelines(train, preprocessing):
    import tensorflow as tf

    from keras_dml.data import class_balanced_batches, decode_image

    balanced = class_balanced_batches(train, C, K, seed=0, preprocessing=preprocessing)

    def load(path, label):
        image = decode_image(tf.io.read_file(path))
        return preprocessing.train(image), label

    plain = (tf.data.Dataset.from_tensor_slices((train.paths, train.labels))
             .repeat().shuffle(4096, seed=0)
             .map(load, num_parallel_calls=tf.data.AUTOTUNE)
             .batch(C * K, drop_remainder=True).prefetch(tf.data.AUTOTUNE))
    return {"keras_dml class_balanced_batches": balanced,
            "plain tf.data (not balanced)": plain}


def time_batches(datasets, batches, repeats):
    """Steady-state images/s: a fresh iterator per repetition, 3 warm-up batches.

    Fresh iterators keep one pipeline's prefetch buffer from filling while
    the other is timed (which would inflate its rate).
    """
    samples = {name: [] for name in datasets}
    for _ in range(repeats):
        for name, dataset in datasets.items():
            iterator = iter(dataset)
            for _ in range(3):
                next(iterator)
            start = time.perf_counter()
            for _ in range(batches):
                next(iterator)
            samples[name].append(batches * C * K / (time.perf_counter() - start))
            del iterator
    return {name: statistics.median(v) for name, v in samples.items()}


def training_throughput(train, preprocessing, steps, repeats):
    import keras
    import tensorflow as tf

    from keras_dml import backbones
    from keras_dml.data import class_balanced_batches
    from keras_dml.layers import EmbeddingHead
    from keras_dml.losses import MultiSimilarity
    from keras_dml.models import DMLModel

    keras.utils.set_random_seed(0)
    backbone = backbones.get("convnet", preprocessing.output_shape)
    model = DMLModel(backbone.input, EmbeddingHead(64)(backbone.output))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=MultiSimilarity())
    live = class_balanced_batches(train, C, K, seed=1, preprocessing=preprocessing)
    x, y = next(iter(live))
    cached = tf.data.Dataset.from_tensors((x, y)).repeat()
    model.fit(cached, steps_per_epoch=1, epochs=1, verbose=0)  # compile
    model.fit(live, steps_per_epoch=1, epochs=1, verbose=0)
    samples = {"fit on the live pipeline": [], "fit on a cached batch": []}
    for _ in range(repeats):
        for name, ds in (("fit on the live pipeline", live), ("fit on a cached batch", cached)):
            start = time.perf_counter()
            model.fit(ds, steps_per_epoch=steps, epochs=1, verbose=0)
            samples[name].append(steps * C * K / (time.perf_counter() - start))
    return {name: statistics.median(v) for name, v in samples.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--train-steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--skip-fit", action="store_true", help="time the pipelines only")
    args = parser.parse_args()
    threads = limit_threads()
    warnings.filterwarnings("ignore", message=".*shuffle=True.*")

    from keras_dml.data import Preprocessing
    from keras_dml.datasets import load

    train = load("cub200", data_dir=CUB, split="train")
    preprocessing = Preprocessing(image_size=args.image_size, resize_size=256)
    print(f"CUB subset train: {len(train)} images, {train.num_classes} classes; batches "
          f"{C} x {K}; crop {args.image_size}; {threads} cores; medians of {args.repeats}")
    rates = time_batches(pipelines(train, preprocessing), args.batches, args.repeats)
    print({name: round(rate, 1) for name, rate in rates.items()}, flush=True)
    if not args.skip_fit:
        rates.update(training_throughput(train, preprocessing, args.train_steps, args.repeats))
    base = rates["plain tf.data (not balanced)"]
    cached = rates.get("fit on a cached batch", 1.0)
    rows = [{"what": name, "images/s": rate,
             "vs plain tf.data": rate / base if "fit" not in name else "",
             "vs cached fit": rate / cached if "fit" in name else ""}
            for name, rate in rates.items()]
    print_table(rows, ["what", "images/s", "vs plain tf.data", "vs cached fit"])


if __name__ == "__main__":
    main()
