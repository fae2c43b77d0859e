"""Measures candidate defaults for `keras-dml train` on the bundled Omniglot.

One configuration per process: model variant, ink polarity, embedding size, batch
design, learning rate and schedule, steps. Prints one JSON line: R@1 and MAP@R on
the 13,180 evaluation images before and after training, training steps/s (after
the first, compiling step) and the time to embed + rank the evaluation set. Used to
choose the CLI's defaults; results are in /work/notes/findings.md.

    python tools/cli_defaults_study.py --variant cnn3 --steps 300
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_dml import backbones, data, datasets, evaluation, losses  # noqa: E402
from keras_dml.layers import EmbeddingHead, L2Normalize  # noqa: E402
from keras_dml.models import DMLModel  # noqa: E402


def build(variant, input_shape, dim, width):
    inputs = keras.Input(input_shape)
    if variant.startswith("convnet"):  # the CLI's backbone (+ EmbeddingHead: global avg pool)
        features = backbones.convnet(input_shape)(inputs)
        if variant == "convnet":
            return DMLModel(inputs, EmbeddingHead(dim)(features))
        x = keras.layers.Flatten()(features)
    else:  # cnn3: (conv 3x3 + BN + ReLU + max-pool) x 3
        x = inputs
        for _ in range(3):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
            x = keras.layers.MaxPooling2D()(x)
        if variant == "cnn3_gap":
            return DMLModel(inputs, EmbeddingHead(dim)(x))
        x = keras.layers.Flatten()(x)
    return DMLModel(inputs, L2Normalize()(keras.layers.Dense(dim)(x)))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--variant", default="cnn3",
                   choices=["convnet", "convnet_flat", "cnn3", "cnn3_gap"])
    p.add_argument("--ink", default="bright", choices=["bright", "dark"])
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--classes", type=int, default=32)
    p.add_argument("--per-class", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--schedule", default="constant", choices=["constant", "cosine"])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--loss", default="MultiSimilarity")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-before", action="store_true")
    args = p.parse_args()

    keras.utils.set_random_seed(args.seed)
    splits = datasets.load("omniglot")

    def transform(x, y):
        x = tf.cast(x, tf.float32) / 255.0
        return (1.0 - x if args.ink == "dark" else x), y

    model = build(args.variant, (28, 28, 1), args.dim, args.width)
    lr = args.lr
    if args.schedule == "cosine":
        lr = keras.optimizers.schedules.CosineDecay(args.lr, args.steps)
    model.compile(optimizer=keras.optimizers.Adam(lr), loss=losses.get(f"keras_dml>{args.loss}"))
    batches = data.class_balanced_batches(splits.train, args.classes, args.per_class,
                                          seed=args.seed, map_fn=transform)
    test = data.evaluation_batches(splits.test, transform=transform)

    def evaluate():
        start = time.perf_counter()
        emb, lab = evaluation.embed_dataset(model, test)
        m = evaluation.retrieval_metrics(emb, lab, ks=(1,))
        return m, time.perf_counter() - start

    result = dict(vars(args), params=int(model.count_params()))
    if not args.no_before:
        before, _ = evaluate()
        result.update(r1_before=round(100 * before["recall@1"], 1))
    model.fit(batches, steps_per_epoch=1, epochs=1, verbose=0)  # compile
    start = time.perf_counter()
    model.fit(batches, steps_per_epoch=args.steps - 1, epochs=1, verbose=0)
    train_s = time.perf_counter() - start
    after, eval_s = evaluate()
    result.update(r1=round(100 * after["recall@1"], 1), map_r=round(100 * after["map@r"], 1),
                  steps_per_s=round((args.steps - 1) / train_s, 2),
                  train_s=round(train_s, 1), eval_s=round(eval_s, 1),
                  load=os.getloadavg()[0])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
