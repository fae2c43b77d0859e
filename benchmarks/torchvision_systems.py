"""The PyTorch user's road on photos, as `benchmarks.worker` units: torchvision's
`ImageFolder` and transforms, a `DataLoader` with its worker processes,
pytorch-metric-learning's `MPerClassSampler` and `MultiSimilarityLoss`. No TensorFlow,
Keras or keras_dml.

The network is keras_dml's `cnn3` written in PyTorch (`pml_omniglot.build_cnn`: 3 x
(conv 3x3, batch norm with Keras' momentum and epsilon, ReLU, max-pool 2), flatten, dense,
L2; Keras' initialisation), on colour images. The transform is `keras-dml train`'s for
image files: resize to `resize` x `resize` (stretched), then a random `crop` x `crop`
crop and a random horizontal flip for training, the centre crop for embedding, pixels
scaled to [0, 1]. The photos are `root/train/<class>/<image>` and `root/test/...`
(`benchmarks.torchvision_baseline.photo_folder`).

- `torchvision_train`: `steps` steps of C x k batches (`MPerClassSampler`, k per class),
  `MultiSimilarityLoss` with `MultiSimilarityMiner` (keras_dml's `MultiSimilarity`
  defaults: alpha 2, beta 50, base 0.5, epsilon 0.1), Adam 1e-3. Each unit draws its
  batches from a fresh iterator of the `DataLoader` (its `num_workers` processes are
  kept between units: `persistent_workers`), as each `fit` of the keras_dml side starts
  its stream.
- `torchvision_embed`: the test photos embedded in batches of 64, `model.eval()` under
  `torch.inference_mode()`, one pass per unit.
"""

import os

import numpy as np
import torch
import torchvision
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.samplers import MPerClassSampler
from torchvision import transforms
from torchvision.datasets import ImageFolder

from benchmarks.pml_omniglot import build_cnn
from benchmarks.torch_systems import DEVICE  # sets the worker's thread count

__all__ = ["torchvision_embed", "torchvision_train"]


def _transforms(resize, crop, training):
    steps = [transforms.Resize((resize, resize))]
    steps += ([transforms.RandomCrop(crop), transforms.RandomHorizontalFlip()] if training
              else [transforms.CenterCrop(crop)])
    return transforms.Compose(steps + [transforms.ToTensor()])


def _network(crop, width, embedding_dim, blocks=3):
    torch.manual_seed(0)
    model = build_cnn(dim=embedding_dim, filters=width, blocks=blocks, size=crop,
                      channels=3).to(DEVICE)
    return model, {"trainable_parameters": sum(p.numel() for p in model.parameters()
                                               if p.requires_grad),
                   "embedding_dim": embedding_dim, "torch": torch.__version__}


def _loader(dataset, batch_size, num_workers, **options):
    return torch.utils.data.DataLoader(dataset, batch_size=batch_size, num_workers=num_workers,
                                       persistent_workers=num_workers > 0, **options)


def torchvision_train(data_dir, resize, crop=64, steps=20, classes_per_batch=32,
                      samples_per_class=4, width=32, embedding_dim=128, num_workers=2):
    """`steps` training steps on `data_dir/train` (see the module docstring)."""
    dataset = ImageFolder(os.path.join(os.fspath(data_dir), "train"),
                          transform=_transforms(resize, crop, True))
    batch_size = classes_per_batch * samples_per_class
    sampler = MPerClassSampler(dataset.targets, m=samples_per_class, batch_size=batch_size,
                               length_before_new_iter=steps * batch_size)
    loader = _loader(dataset, batch_size, num_workers, sampler=sampler, drop_last=True)
    model, facts = _network(crop, width, embedding_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = losses.MultiSimilarityLoss(alpha=2, beta=50, base=0.5)
    miner = miners.MultiSimilarityMiner(epsilon=0.1)

    def step():
        model.train()
        done = 0
        for images, targets in loader:
            images, targets = images.to(DEVICE), targets.to(DEVICE)
            optimizer.zero_grad(set_to_none=True)
            embeddings = model(images)
            loss = loss_fn(embeddings, targets, miner(embeddings, targets))
            loss.backward()
            optimizer.step()
            done += 1
        if done != steps:
            raise RuntimeError(f"the DataLoader gave {done} batches, not {steps}")
        return loss.item()

    value = step()
    return step, {**facts, "loss": value, "steps": steps, "torchvision": torchvision.__version__,
                  "batch": [classes_per_batch, samples_per_class],
                  "images_per_unit": steps * batch_size, "num_workers": num_workers,
                  "transform": {"resize": resize, "crop": crop, "normalization": "unit"}}


def torchvision_embed(data_dir, resize, crop=64, batch_size=64, width=32, embedding_dim=128,
                      num_workers=2):
    """One embedding pass over `data_dir/test` (see the module docstring)."""
    dataset = ImageFolder(os.path.join(os.fspath(data_dir), "test"),
                          transform=_transforms(resize, crop, False))
    loader = _loader(dataset, batch_size, num_workers, shuffle=False)
    model, facts = _network(crop, width, embedding_dim)
    model.eval()

    def step():
        with torch.inference_mode():
            return np.concatenate([model(images.to(DEVICE)).cpu().numpy()
                                   for images, _ in loader])

    embeddings = step()
    return step, {**facts, "images_per_unit": len(dataset),
                  "embedding_shape": list(embeddings.shape), "num_workers": num_workers,
                  "transform": {"resize": resize, "crop": crop, "normalization": "unit"}}
