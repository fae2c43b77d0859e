"""Batches shared by the tests of the pair losses Contrastive, Triplet, the lifted
structure losses, binomial deviance, BinLifted and MS/RAW (test_losses_<module>.py) and
their settings' generic checks (test_losses_cases.py)."""

import numpy as np


def _batch(classes=4, per_class=3, dim=6, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    labels = np.repeat(np.arange(classes), per_class).astype("int32")
    rng.shuffle(labels)
    return labels, (scale * rng.normal(size=(classes * per_class, dim))).astype("float32")


def _uneven(seed=1):
    """Classes of sizes 4, 3, 2, 1 and 1 (singletons have no positive)."""
    rng = np.random.default_rng(seed)
    labels = np.array([0, 0, 0, 0, 1, 1, 1, 2, 2, 3, 4], "int32")
    return labels, rng.normal(size=(len(labels), 5)).astype("float32")
