"""Benchmark inputs built with NumPy only, so every worker gets identical arrays."""

import os

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ../shared/datasets beside the repository (a worktree sits one level deeper)
SHARED = next((path for path in (os.path.join(_ROOT, "..", "shared", "datasets"),
                                 os.path.join(_ROOT, "..", "..", "shared", "datasets"))
               if os.path.isdir(path)), os.path.join(_ROOT, "..", "shared", "datasets"))


def batch(n, d, samples_per_class=4, seed=0, classes=None):
    """Random embeddings (n, d) float32 and C x k int32 labels (modulo `classes` if given)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(n) // samples_per_class
    if classes is not None:
        labels = labels % classes
    return rng.normal(size=(n, d)).astype("float32"), labels.astype("int32")


def sop_sized_labels(samples=59_551, classes=11_318, smallest=2, largest=12, seed=0):
    """Skewed class sizes in [smallest, largest] summing to `samples`, labels shuffled.

    The defaults are Stanford Online Products' train split (2 to 12 images per
    class, 5.26 on average): 2 + a geometric draw per class (most classes small, a
    tail up to 12), nudged one class at a time to the exact total.
    """
    rng = np.random.default_rng(seed)
    mean_extra = samples / classes - smallest
    counts = np.clip(smallest + rng.geometric(1 / (mean_extra + 1), classes) - 1,
                     smallest, largest)
    while counts.sum() != samples:
        step = 1 if counts.sum() < samples else -1
        room = np.flatnonzero((counts + step >= smallest) & (counts + step <= largest))
        fix = rng.choice(room, min(len(room), abs(samples - counts.sum())), replace=False)
        counts[fix] += step
    return rng.permutation(np.repeat(np.arange(classes), counts))


def clustered(n, d, num_classes, seed=0, spread=2.5):
    """Unit-norm float32 embeddings around class centres; labels of uneven class sizes."""
    rng = np.random.default_rng(seed)
    labels = np.concatenate([np.arange(num_classes),
                             rng.integers(0, num_classes, n - num_classes)])
    labels = rng.permutation(labels)
    centres = rng.normal(size=(num_classes, d)).astype("float32")
    x = centres[labels] + spread * rng.normal(size=(n, d)).astype("float32")
    return x / np.linalg.norm(x, axis=1, keepdims=True), labels.astype("int64")


BUNDLED_OMNIGLOT = os.path.join(_ROOT, "keras_dml", "datasets", "omniglot_28x28.npz")


def bundled_omniglot():
    """The 19,280 training images keras_dml bundles (`datasets.load("omniglot").train`),
    read with NumPy: uint8 (n, 28, 28, 1), 255 = background, and int64 labels 0-963."""
    with np.load(BUNDLED_OMNIGLOT) as bundled:
        images = bundled["background"]
    labels = np.repeat(np.arange(images.shape[0]), images.shape[1])
    return images.reshape(-1, *images.shape[2:], 1), labels


def omniglot28(split, data_dir=None, cache_dir="/tmp"):
    """Omniglot images resized to 28 x 28, ink = 1: float32 (n, 28, 28, 1), int64 labels.

    `split` is "background" (964 training characters) or "evaluation" (659, 13,180
    images). Resized once with PIL's antialiased bilinear filter and cached as npz.
    """
    data_dir = data_dir or os.path.join(SHARED, "omniglot")
    cache = os.path.join(cache_dir, f"keras_dml_bench_omniglot28_{split}.npz")
    if os.path.exists(cache):
        with np.load(cache) as saved:
            return saved["x"], saved["y"]
    from PIL import Image

    with np.load(os.path.join(data_dir, f"images_{split}.npz")) as raw:
        images, labels = raw["images"], raw["labels"]
    images = images.reshape(-1, *images.shape[2:])
    x = np.stack([np.asarray(Image.fromarray(((1 - im) * 255).astype(np.uint8))
                             .resize((28, 28), Image.BILINEAR)) for im in images])
    x = (x.astype("float32") / 255.0)[..., None]
    y = labels.reshape(-1).astype("int64")
    tmp = cache + f".{os.getpid()}.npz"
    np.savez(tmp, x=x, y=y)
    os.replace(tmp, cache)
    return x, y
