"""Issue-18 losses on Omniglot against pytorch-metric-learning at the same budget.

The protocol: Omniglot background characters train (964 classes), evaluation
characters test (659 classes, 13,180 images, leave-one-out retrieval, cosine);
28 x 28 images with ink = 1; the same CNN on both sides (three blocks of 3 x 3 conv
64 - batch norm - ReLU - 2 x 2 max pool, flatten, dense 128, L2 normalisation);
Adam 1e-3 (over the class weights too); the same C x k = 32 x 4 index stream; the
same number of steps. keras_dml trains a `DMLModel` with the keras_dml loss, PML a
torch copy of the network with the PML loss of the same name and defaults. Both are
evaluated by `keras_dml.evaluation.retrieval_metrics` (Recall@1, MAP@R).

`--simclr` adds a label-free run: NT-Xent on `two_view_batches` (two augmented
views of 64 training images per step, labels = instance ids), compared with the
same network untrained.

    python examples/new_losses_omniglot.py --steps 300 --out /tmp/new_losses.json
    python examples/new_losses_omniglot.py --quick          # a smoke run (tests)
"""

import argparse
import json
import os
import sys
import time

import keras
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ice_omniglot_s_ablation import DATA, load_split  # noqa: E402

from keras_dml import losses  # noqa: E402
from keras_dml.data import two_view_batches  # noqa: E402
from keras_dml.evaluation import retrieval_metrics  # noqa: E402
from keras_dml.layers import EmbeddingHead  # noqa: E402
from keras_dml.models import DMLModel  # noqa: E402

LOSSES = ("ArcFace", "CosFace", "SupervisedContrastive", "Circle", "SmoothAP")
PML_NAMES = {"SupervisedContrastive": "SupConLoss"}


def keras_model(size, dim=128):
    inputs = keras.Input((size, size, 1))
    x = inputs
    for _ in range(3):
        x = keras.layers.Conv2D(64, 3, padding="same")(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    return DMLModel(inputs, EmbeddingHead(dim)(keras.layers.Flatten()(x)))


def torch_model(size, dim=128):
    import torch

    layers, channels = [], 1
    for _ in range(3):
        layers += [torch.nn.Conv2d(channels, 64, 3, padding=1), torch.nn.BatchNorm2d(64),
                   torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
        channels = 64
    side = size // 8
    return torch.nn.Sequential(*layers, torch.nn.Flatten(), torch.nn.Linear(64 * side * side,
                                                                              dim))


def index_stream(labels, steps, classes, k, seed):
    """The same C x k index batches for both sides."""
    rng = np.random.default_rng(seed)
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for _ in range(steps):
        chosen = rng.choice(len(by_class), classes, replace=False)
        yield np.concatenate([rng.choice(by_class[c], k, replace=False) for c in chosen])


def evaluate(embeddings, labels):
    result = retrieval_metrics(embeddings, labels, ks=(1,), metrics=("recall@k", "map@r"))
    return {"R@1": 100.0 * result["recall@1"], "MAP@R": 100.0 * result["map@r"]}


def make_ours(name, classes):
    cls = getattr(losses, name)
    return cls(classes) if name in ("ArcFace", "CosFace") else cls()


def run_ours(name, train, test, args):
    keras.utils.set_random_seed(args.seed)
    model = keras_model(args.size)
    model.compile(keras.optimizers.Adam(args.lr),
                  loss=make_ours(name, len(np.unique(train[1]))), jit_compile=False)
    start = time.perf_counter()
    for idx in index_stream(train[1], args.steps, args.classes, args.k, args.seed):
        model.train_on_batch(train[0][idx], train[1][idx])
    seconds = time.perf_counter() - start
    return {**evaluate(model.predict(test[0], batch_size=1024, verbose=0), test[1]),
            "seconds": seconds}


def run_pml(name, train, test, args):
    import torch
    from pytorch_metric_learning import losses as pml

    torch.manual_seed(args.seed)
    model = torch_model(args.size)
    classes = len(np.unique(train[1]))
    peer = getattr(pml, PML_NAMES.get(name, f"{name}Loss"))
    loss = peer(classes, 128) if name in ("ArcFace", "CosFace") else peer()
    params = list(model.parameters()) + list(loss.parameters())
    optimizer = torch.optim.Adam(params, lr=args.lr)
    images = torch.tensor(train[0]).permute(0, 3, 1, 2)
    labels = torch.tensor(train[1], dtype=torch.long)
    model.train()
    start = time.perf_counter()
    for idx in index_stream(train[1], args.steps, args.classes, args.k, args.seed):
        if name == "SmoothAP":  # PML needs sorted, equal-count labels (ours: class-major)
            idx = idx[np.argsort(train[1][idx], kind="stable")]
        idx = torch.tensor(idx)
        embeddings = torch.nn.functional.normalize(model(images[idx]), dim=1)
        value = loss(embeddings, labels[idx])
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    seconds = time.perf_counter() - start
    model.eval()
    with torch.no_grad():
        test_images = torch.tensor(test[0]).permute(0, 3, 1, 2)
        out = torch.cat([model(test_images[i:i + 1024]) for i in range(0, len(test_images),
                                                                          1024)])
    return {**evaluate(torch.nn.functional.normalize(out, dim=1).numpy(), test[1]),
            "seconds": seconds}


def run_simclr(train, test, args):
    keras.utils.set_random_seed(args.seed)
    model = keras_model(args.size)
    untrained = evaluate(model.predict(test[0], batch_size=1024, verbose=0), test[1])
    augment = keras.Sequential([keras.layers.RandomTranslation(0.15, 0.15, fill_mode="constant"),
                                keras.layers.RandomRotation(0.05, fill_mode="constant"),
                                keras.layers.RandomZoom(0.15, fill_mode="constant")])
    batches = two_view_batches(train[0], augment, args.simclr_instances, seed=args.seed)
    model.compile(keras.optimizers.Adam(args.lr), loss=losses.NTXent(temperature=0.1),
                  jit_compile=False)
    start = time.perf_counter()
    model.fit(batches, steps_per_epoch=args.steps, epochs=1, verbose=0)
    trained = evaluate(model.predict(test[0], batch_size=1024, verbose=0), test[1])
    return untrained, {**trained, "seconds": time.perf_counter() - start}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=DATA)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--classes", type=int, default=32, help="C")
    parser.add_argument("--k", type=int, default=4)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--losses", nargs="+", choices=LOSSES, default=list(LOSSES))
    parser.add_argument("--sides", nargs="+", choices=("keras_dml", "pml"),
                        default=["keras_dml", "pml"])
    parser.add_argument("--simclr", action="store_true")
    parser.add_argument("--simclr-instances", type=int, default=64)
    parser.add_argument("--quick", action="store_true", help="5 steps on 2,000 test images")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    train = load_split(os.path.join(args.data, "images_background.npz"), args.size)
    test = load_split(os.path.join(args.data, "images_evaluation.npz"), args.size)
    if args.quick:
        args.steps, test = 5, (test[0][:2000], test[1][:2000])
    rows = []

    def record(row):
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"args": vars(args), "rows": rows}, f, indent=1)

    for name in args.losses:
        if "keras_dml" in args.sides:
            record({"loss": name, "side": "keras_dml", **run_ours(name, train, test, args)})
        if "pml" in args.sides:
            record({"loss": name, "side": "pml", **run_pml(name, train, test, args)})
    if args.simclr:
        untrained, trained = run_simclr(train, test, args)
        record({"loss": "untrained network", "side": "keras_dml", **untrained})
        record({"loss": "NTXent, no labels (SimCLR)", "side": "keras_dml", **trained})
    print(f"\n{args.steps} steps of {args.classes} x {args.k}\n| loss | side | R@1 | MAP@R | s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['loss']} | {row['side']} | {row['R@1']:.1f} | {row['MAP@R']:.1f} | "
              f"{row.get('seconds', 0):.0f} |")


if __name__ == "__main__":
    main()
