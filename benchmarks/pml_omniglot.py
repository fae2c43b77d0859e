"""The Omniglot protocol on the PyTorch side: pytorch-metric-learning's losses, same CNN.

The reference side of keras_dml's equal-budget table (examples/omniglot_protocol.py
is the Keras side). Same data (the protocol's NumPy loader), the same batches in
the same order (`batch_order`, a function of the seed), the same network (3 x
(conv 3x3 64, BN, ReLU, max-pool), flatten, dense 128, L2; Glorot-uniform weights,
zero biases, BN momentum 0.01 and epsilon 1e-3 as Keras' defaults), Adam 1e-3,
the same threads, and the same metric code (keras_dml.evaluation, imported after
training). One run per process:

    python benchmarks/pml_omniglot.py --loss MultiSimilarity --variant default --steps 2000
    python benchmarks/pml_omniglot.py --list

Variants: "default" is the PML class with its own defaults; "paper" uses the
hyperparameters keras_dml's default uses (the papers' recommended values, e.g.
Proxy Anchor's 100x proxy learning rate), where they differ from PML's.
The result is one JSON line (printed, and appended to --out).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import omniglot_protocol as protocol  # noqa: E402

NUM_CLASSES, DIM = 964, 128


def _variants():
    """name -> variant -> (description, build(embedding_size) -> (loss, miner, proxy lr mult))."""
    from pytorch_metric_learning import distances, losses, miners

    cosine = distances.CosineSimilarity
    return {
        "MultiSimilarity": {
            "default": ("MultiSimilarityLoss() + MultiSimilarityMiner() (alpha 2, beta 50, "
                        "base 0.5, epsilon 0.1 = the paper's)",
                        lambda: (losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner(), 1)),
        },
        "ProxyAnchor": {
            "default": ("ProxyAnchorLoss(964, 128) (margin 0.1, alpha 32), proxies at the "
                        "network's learning rate",
                        lambda: (losses.ProxyAnchorLoss(NUM_CLASSES, DIM), None, 1)),
            "paper": ("ProxyAnchorLoss(964, 128), proxy learning rate x100 (the paper's)",
                      lambda: (losses.ProxyAnchorLoss(NUM_CLASSES, DIM), None, 100)),
        },
        "Contrastive": {
            "default": ("ContrastiveLoss() (Euclidean, pos_margin 0, neg_margin 1)",
                        lambda: (losses.ContrastiveLoss(), None, 1)),
            "paper": ("ContrastiveLoss(pos_margin=1, neg_margin=0.5, CosineSimilarity) "
                      "(unified view eq. 5, keras_dml's default)",
                      lambda: (losses.ContrastiveLoss(1.0, 0.5, distance=cosine()), None, 1)),
        },
        "Triplet": {
            "default": ("TripletMarginLoss() (margin 0.05) + TripletMarginMiner(semihard)",
                        lambda: (losses.TripletMarginLoss(),
                                 miners.TripletMarginMiner(type_of_triplets="semihard"), 1)),
            "paper": ("TripletMarginLoss(margin 0.1, CosineSimilarity) + semihard miner "
                      "(margin 0.1, cosine) (keras_dml's default margin)",
                      lambda: (losses.TripletMarginLoss(0.1, distance=cosine()),
                               miners.TripletMarginMiner(0.1, distance=cosine(),
                                                         type_of_triplets="semihard"), 1)),
        },
        "NormalizedSoftmax": {
            "default": ("NormalizedSoftmaxLoss(964, 128) (temperature 0.05)",
                        lambda: (losses.NormalizedSoftmaxLoss(NUM_CLASSES, DIM), None, 1)),
        },
        "SoftTriple": {
            "default": ("SoftTripleLoss(964, 128) (10 centers, la 20, gamma 0.1, margin 0.01 "
                        "= the paper's)",
                        lambda: (losses.SoftTripleLoss(NUM_CLASSES, DIM), None, 1)),
        },
        "NCA": {
            "default": ("NCALoss() (softmax_scale 1 on squared Euclidean distances)",
                        lambda: (losses.NCALoss(), None, 1)),
            "paper": ("NCALoss(softmax_scale=0.5): exp(-0.5 d^2) = exp(S - 1), keras_dml's "
                      "NCA(scale=1) on cosine",
                      lambda: (losses.NCALoss(softmax_scale=0.5), None, 1)),
        },
        # margin-softmax and pair-family losses: PML's defaults, the same as keras_dml's
        "ArcFace": {"default": ("ArcFaceLoss(964, 128) (margin 28.6 degrees, scale 64)",
                                lambda: (losses.ArcFaceLoss(NUM_CLASSES, DIM), None, 1))},
        "CosFace": {"default": ("CosFaceLoss(964, 128) (margin 0.35, scale 64)",
                                lambda: (losses.CosFaceLoss(NUM_CLASSES, DIM), None, 1))},
        "SupervisedContrastive": {"default": ("SupConLoss() (temperature 0.1)",
                                              lambda: (losses.SupConLoss(), None, 1))},
        "Circle": {"default": ("CircleLoss() (m 0.4, gamma 80)",
                               lambda: (losses.CircleLoss(), None, 1))},
        "SmoothAP": {"default": ("SmoothAPLoss() (temperature 0.01; PML 2.9 groups the batch "
                                 "into blocks of C rows, right only for C = k)",
                                 lambda: (losses.SmoothAPLoss(), None, 1))},
    }


def build_cnn(dim=DIM, filters=64, blocks=3, size=protocol.SIZE, channels=1):
    """The protocol's CNN in PyTorch, initialised like Keras' defaults (`channels`: of
    its input images)."""
    import torch
    from torch import nn

    layers = []
    for _ in range(blocks):
        layers += [nn.Conv2d(channels, filters, 3, padding=1),
                   nn.BatchNorm2d(filters, eps=1e-3, momentum=0.01), nn.ReLU(), nn.MaxPool2d(2)]
        channels, size = filters, size // 2
    layers += [nn.Flatten(), nn.Linear(filters * size * size, dim)]
    model = nn.Sequential(*layers)
    for module in model.modules():
        if isinstance(module, (nn.Conv2d, nn.Linear)):
            nn.init.xavier_uniform_(module.weight)
            nn.init.zeros_(module.bias)

    class Embedder(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model

        def forward(self, x):
            return torch.nn.functional.normalize(self.body(x), dim=1)

    return Embedder()


def run(loss_name, variant, steps, seed, classes_per_batch, samples_per_class, data_dir=None,
        learning_rate=1e-3, eval_every=None, test_classes=None):
    """Train with a PML loss under the protocol; returns the same dict as run_protocol
    (`test_classes`: evaluate on the first this many test characters only)."""
    import torch

    description, build = _variants()[loss_name][variant]
    x_train, y_train, x_test, y_test = protocol.load_data(data_dir)
    if test_classes:
        x_test, y_test = x_test[y_test < test_classes], y_test[y_test < test_classes]
    order = protocol.batch_order(y_train, classes_per_batch, samples_per_class, steps, seed)
    torch.manual_seed(seed)
    model = build_cnn()
    loss, miner, proxy_multiplier = build()
    groups = [{"params": model.parameters(), "lr": learning_rate}]
    loss_params = list(loss.parameters())
    if loss_params:
        groups.append({"params": loss_params, "lr": learning_rate * proxy_multiplier})
    optimizer = torch.optim.Adam(groups)
    images = torch.from_numpy(x_train).permute(0, 3, 1, 2).contiguous()
    labels = torch.from_numpy(y_train.astype(np.int64))
    test_images = torch.from_numpy(x_test).permute(0, 3, 1, 2).contiguous()

    def embed():
        model.eval()
        with torch.no_grad():
            out = torch.cat([model(test_images[i:i + 1024])
                             for i in range(0, len(test_images), 1024)])
        model.train()
        return out.numpy()

    untrained = embed()
    curve_embeddings, seconds, value = [(0, untrained)], 0.0, float("nan")
    start = time.perf_counter()
    for step, indices in enumerate(order, 1):
        index = torch.from_numpy(indices)
        batch, batch_labels = images[index], labels[index]
        embeddings = model(batch)
        pairs = miner(embeddings, batch_labels) if miner is not None else None
        value_t = loss(embeddings, batch_labels, pairs)
        optimizer.zero_grad()
        value_t.backward()
        optimizer.step()
        value = float(value_t.detach())
        if eval_every and step % eval_every == 0 and step < steps:
            seconds += time.perf_counter() - start
            curve_embeddings.append((step, embed()))
            start = time.perf_counter()
    seconds += time.perf_counter() - start
    final = embed()
    result = protocol.metrics_from_embeddings(final, y_test)
    before = protocol.metrics_from_embeddings(untrained, y_test)
    result.update(untrained_R1=before["R@1"], train_seconds=seconds, steps=steps,
                  final_loss=value, description=description)
    if eval_every:
        curve = [(s, *(lambda m: (m["R@1"], m["MAP@R"]))(
            protocol.metrics_from_embeddings(e, y_test))) for s, e in curve_embeddings]
        result["curve"] = curve + [(steps, result["R@1"], result["MAP@R"])]
    return result


def main(argv=None):
    parser = protocol.add_protocol_arguments(argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0]))
    parser.add_argument("--loss", default="MultiSimilarity")
    parser.add_argument("--variant", default="default", help="default or paper")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--eval-every", type=int, default=None)
    parser.add_argument("--list", action="store_true", help="list losses and variants")
    args = parser.parse_args(argv)
    variants = _variants()
    if args.list:
        for name, table in variants.items():
            for variant, (description, _) in table.items():
                print(f"{name:18s} {variant:8s} {description}")
        return {}
    if args.loss not in variants or args.variant not in variants[args.loss]:
        known = {name: sorted(table) for name, table in variants.items()}
        parser.error(f"--loss {args.loss} --variant {args.variant} is not one of {known}")
    import torch

    torch.set_num_threads(args.threads)
    started = time.time()
    result = run(args.loss, args.variant, args.steps, args.seed, args.classes_per_batch,
                 args.samples_per_class, args.data, args.learning_rate, args.eval_every)
    import pytorch_metric_learning

    row = {"system": f"pml {pytorch_metric_learning.__version__}", "loss": args.loss,
           "variant": args.variant, "steps": args.steps, "seed": args.seed,
           "classes_per_batch": args.classes_per_batch,
           "samples_per_class": args.samples_per_class, "threads": args.threads, **result,
           "wall_seconds": time.time() - started, **protocol.machine()}
    print(json.dumps(row), flush=True)
    protocol.append_result(args.out, row)
    return row


if __name__ == "__main__":
    sys.exit(0 if main() is not None else 1)
