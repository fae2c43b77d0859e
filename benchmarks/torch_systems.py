"""PyTorch + pytorch-metric-learning systems for `benchmarks.worker` (no TensorFlow)."""

import os

import numpy as np
import torch

from benchmarks import data

_threads = int(os.environ.get("BENCH_THREADS", "0"))
if _threads:
    torch.set_num_threads(_threads)
DEVICE = torch.device("cuda" if os.environ.get("BENCH_DEVICE") == "gpu" else "cpu")

from pytorch_metric_learning import distances, losses, miners  # noqa: E402


def _pml(name, config):
    """A PML loss or miner by class name; a "distance" entry names a PML distance class."""
    config = dict(config or {})
    if "distance" in config:
        config["distance"] = getattr(distances, config["distance"])()
    owner = miners if name.endswith("Miner") else losses
    return getattr(owner, name)(**config)


def loss_step(loss, config=None, miner=None, miner_config=None, n=1024, d=512,
              samples_per_class=4, classes=None, measure_memory=False):
    """Forward + backward of a PML loss (with its miner) w.r.t. (n, d) embeddings and the
    loss's own parameters. torch's generator is seeded: a random miner (distance
    weighted sampling) draws the same pairs in every process."""
    torch.manual_seed(0)
    x_np, y_np = data.batch(n, d, samples_per_class, classes=classes)
    if config and "num_classes" in config:  # a loss with class weights: (d, C) of this size
        config = {**config, "embedding_size": d}
    loss = _pml(loss, config)
    miner = _pml(miner, miner_config) if miner else None
    x = torch.tensor(x_np, requires_grad=True, device=DEVICE)
    y = torch.tensor(y_np, dtype=torch.long, device=DEVICE)

    weights = list(loss.parameters())  # proxies, class weights, a learnable margin

    def step():
        x.grad = None
        for weight in weights:
            weight.grad = None
        value = loss(x, y) if miner is None else loss(x, y, miner(x, y))
        value.backward()
        return value.item()

    if measure_memory:  # the first step's memory is then measured as the step's
        return step
    value = step()
    return step, {"value": value, "finite": bool(torch.isfinite(x.grad).all())}


def sampler_epoch(classes_per_batch=90, samples_per_class=2, samples=59_551, classes=11_318):
    """One epoch of index batches from PML's `MPerClassSampler` on SOP-sized labels."""
    from pytorch_metric_learning.samplers import MPerClassSampler

    labels = data.sop_sized_labels(samples, classes)
    batch_size = classes_per_batch * samples_per_class
    sampler = MPerClassSampler(labels, m=samples_per_class, batch_size=batch_size,
                               length_before_new_iter=samples)

    def step():
        return list(iter(sampler))

    drawn = step()
    return step, {"batches": len(drawn) // batch_size, "batch_size": batch_size}


def multiple_negatives_ranking(n=1024, d=512, samples_per_class=1, scale=20.0):
    """sentence-transformers' MultipleNegativesRankingLoss in torch (no PML class): cross
    entropy of scale * cos(q_i, p_j) against j = i, rows = (query | positive) halves."""
    x_np, _ = data.batch(n, d, samples_per_class)
    x = torch.tensor(x_np, requires_grad=True, device=DEVICE)
    targets = torch.arange(n, device=DEVICE)

    def step():
        x.grad = None
        queries, documents = (torch.nn.functional.normalize(h, dim=1) for h in x.chunk(2, 1))
        value = torch.nn.functional.cross_entropy(scale * queries @ documents.T, targets)
        value.backward()
        return value.item()

    value = step()
    return step, {"value": value, "finite": bool(torch.isfinite(x.grad).all())}


def _faiss_on_device():
    """On `--device gpu`, stop unless PML's faiss search can run on the GPU: PML falls
    back to faiss on the CPU without a word when faiss has no GPU support."""
    if DEVICE.type == "cuda":
        from benchmarks import faiss_systems

        faiss_systems.require_gpu()


def accuracy_calculator(n=20000, d=512, classes=5000):
    """PML's `AccuracyCalculator` (faiss inside): P@1, R-Precision, MAP@R, leave-one-out.

    The embeddings are on the worker's device: PML searches on the GPU for CUDA tensors.
    """
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    _faiss_on_device()
    x, labels = data.clustered(n, d, classes, seed=1)
    x, labels = torch.from_numpy(x).to(DEVICE), torch.from_numpy(labels).to(DEVICE)
    calculator = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count")

    def step():
        return calculator.get_accuracy(x, labels)

    return step, {key: float(value) for key, value in step().items()}


def nearest_neighbors(n=20000, d=512, k=101, classes=5000, batch_size=None):
    """PML's exact kNN on the worker's device: `CustomKNN(DotProductSimilarity())` (a
    torch matmul and `topk` per block of queries, no faiss), every row against all rows.
    `batch_size`: queries per block, default 1,024 (keras_dml's TensorFlow kernel's chunk;
    PML's default, none, holds the whole n x n matrix). The rows are unit vectors:
    PML's normalisation is turned off, as keras_dml's "dot" metric does none."""
    from pytorch_metric_learning.utils.inference import CustomKNN

    x, _ = data.clustered(n, d, classes)
    x = torch.from_numpy(x).to(DEVICE)
    knn = CustomKNN(distances.DotProductSimilarity(normalize_embeddings=False),
                    batch_size=batch_size or 1024)

    def step():
        _, indices = knn(x, k, x, False)
        return indices.cpu()

    indices = step()
    return step, {"first_neighbours": indices[:20, :10].tolist()}


class OmniglotCNN(torch.nn.Module):
    """The Omniglot recipe's CNN: 3 x (conv `width`, BN, ReLU, max-pool), dense 128, L2."""

    def __init__(self, width=64):
        super().__init__()
        blocks, channels = [], 1
        for _ in range(3):
            blocks += [torch.nn.Conv2d(channels, width, 3, padding=1),
                       torch.nn.BatchNorm2d(width), torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
            channels = width
        self.features = torch.nn.Sequential(*blocks, torch.nn.Flatten())
        self.projection = torch.nn.Linear(width * 3 * 3, 128)

    def forward(self, x):
        return torch.nn.functional.normalize(self.projection(self.features(x)), dim=1)


def omniglot_train(steps=50, classes_per_batch=32, samples_per_class=4, width=64,
                   bundled=False):
    """`steps` training steps: DataLoader + `MPerClassSampler`, MultiSimilarity + miner, Adam.

    `width` filters a convolution; `bundled`: the 28 x 28 images keras_dml bundles
    (`data.bundled_omniglot`, scaled to [0, 1] per batch as the main job's stream does)
    instead of those resized from ../shared/datasets (the Omniglot recipe's)."""
    from pytorch_metric_learning.samplers import MPerClassSampler

    torch.manual_seed(0)
    x, y = data.bundled_omniglot() if bundled else data.omniglot28("background")
    images = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    labels = torch.from_numpy(y)
    batch_size = classes_per_batch * samples_per_class
    sampler = MPerClassSampler(y, m=samples_per_class, batch_size=batch_size,
                               length_before_new_iter=len(y))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, labels),
                                         batch_size=batch_size, sampler=sampler,
                                         drop_last=True, num_workers=0)
    model = OmniglotCNN(width).to(DEVICE)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5)
    miner = miners.MultiSimilarityMiner(epsilon=0.1)
    stream = iter(loader)
    last = {}

    def step():
        nonlocal stream
        model.train()
        for _ in range(steps):
            try:
                xb, yb = next(stream)
            except StopIteration:
                stream = iter(loader)
                xb, yb = next(stream)
            xb, yb = xb.to(DEVICE).float(), yb.to(DEVICE)
            if bundled:
                xb = xb / 255.0
            optimizer.zero_grad(set_to_none=True)
            embeddings = model(xb)
            loss = loss_fn(embeddings, yb, miner(embeddings, yb))
            loss.backward()
            optimizer.step()
        last["loss"] = loss.item()

    step()
    return step, {"steps": steps, "loss": last["loss"], "width": width}


def omniglot_evaluate(batch_size=1024, limit=None):
    """Embed the 13,180 evaluation images (the first `limit`); PML's `AccuracyCalculator`."""
    from pytorch_metric_learning.utils.accuracy_calculator import AccuracyCalculator

    _faiss_on_device()
    torch.manual_seed(0)
    x, y = data.omniglot28("evaluation")
    x, y = x[:limit], y[:limit]
    images = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)))
    model = OmniglotCNN().to(DEVICE).eval()
    calculator = AccuracyCalculator(
        include=("precision_at_1", "r_precision", "mean_average_precision_at_r"),
        k="max_bin_count")

    def step():
        with torch.no_grad():
            embeddings = torch.cat([model(images[s:s + batch_size].to(DEVICE))
                                    for s in range(0, len(images), batch_size)])
        return calculator.get_accuracy(embeddings, torch.from_numpy(y))

    return step, {key: float(value) for key, value in step().items()}
