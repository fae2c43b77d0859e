"""Embedding collapse: every input mapped to (nearly) the same point, found cheaply.

A collapsed embedder scores chance-level retrieval that looks like slow training.
Healthy embedders of one domain are far from orthogonal but keep a relative spread of
0.1 or more; collapsed ones (a backbone whose BatchNorm statistics lag its weights, or
whose inputs are normalised twice) fall to 0.005 and below. `COLLAPSED_BELOW` sits
between the two groups (the figures: benchmarks/README.md, "Figures moved from
docstrings").
"""

import numpy as np

__all__ = ["CAUSES", "COLLAPSED_BELOW", "TRAIN_CAUSES", "collapse_warning", "embedding_spread"]

#: Relative spread (`embedding_spread`) below which embeddings count as collapsed.
COLLAPSED_BELOW = 0.01

CAUSES = (
    "BatchNorm statistics (inference uses moving averages; with a momentum of 0.99-0.999, "
    "as in Keras Applications, they need thousands of steps to follow the weights: train "
    "longer, lower the momentum, or freeze the BatchNorm layers of a pretrained backbone)",
    "a learning rate too high",
    "inputs normalised twice (a backbone that rescales inside, such as MobileNetV3, "
    "EfficientNet or ConvNeXt, fed a keras_dml.data.Preprocessing that normalises: use "
    "normalization='none')",
)

#: `CAUSES` in `keras-dml train`'s terms (its flags), for runs of `keras_dml.training`.
TRAIN_CAUSES = (
    "BatchNorm statistics of a backbone trained from random weights (inference uses "
    "moving averages that need thousands of steps to follow the weights: start from "
    "--weights imagenet or an earlier run, or train longer with --epochs / "
    "--steps-per-epoch)",
    "a learning rate too high (lower --learning-rate, or add --warmup-steps)",
)


def embedding_spread(embeddings):
    """How far apart embeddings are, independent of their scale.

    Args:
        embeddings: float `(N, d)`, N >= 2.

    Returns:
        A dict: `relative_spread`, sqrt(sum of the per-dimension variances /
        mean squared norm), 0 for identical rows and about 1 for centred ones
        (for unit rows it is sqrt(1 - |mean|^2)); `mean_cosine`, the mean
        cosine similarity of distinct pairs (1.0 when all point one way);
        `max_std`, the largest per-dimension standard deviation.
    """
    x = np.asarray(embeddings, np.float64)
    if x.ndim != 2 or len(x) < 2:
        raise ValueError(f"embeddings must be (N >= 2, d), got shape {x.shape}.")
    mean_square = float(np.mean(np.sum(x * x, axis=1)))
    variance = float(x.var(axis=0).sum())
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    unit = np.divide(x, norms, out=np.zeros_like(x), where=norms > 0)
    n = len(x)
    mean_cosine = (float(np.sum(unit.sum(axis=0) ** 2)) - float(np.sum(unit * unit))) / (
        n * (n - 1))
    return {"relative_spread": float(np.sqrt(variance / mean_square)) if mean_square else 0.0,
            "mean_cosine": mean_cosine, "max_std": float(np.sqrt(x.var(axis=0).max()))}


def collapse_warning(embeddings, causes=CAUSES):
    """A warning naming the likely causes when `embeddings` have collapsed, else None.

    Collapsed: `embedding_spread(embeddings)["relative_spread"] < COLLAPSED_BELOW`.
    `causes` are the ways out named (`TRAIN_CAUSES` for the command line's flags).
    """
    spread = embedding_spread(embeddings)
    if spread["relative_spread"] >= COLLAPSED_BELOW:
        return None
    causes = "; ".join(f"({i}) {cause}" for i, cause in enumerate(causes, 1))
    return (f"keras_dml: the {len(embeddings):,} evaluated embeddings have collapsed to nearly "
            f"one point (relative spread {spread['relative_spread']:.2g} < {COLLAPSED_BELOW}, "
            f"mean pairwise cosine {spread['mean_cosine']:.6f}, largest per-dimension std "
            f"{spread['max_std']:.2g}), so retrieval is at chance level. Likely causes: "
            f"{causes}.")
