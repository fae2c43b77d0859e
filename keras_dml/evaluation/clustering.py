"""Clustering quality: NMI of k-means clusters against the classes."""

import numpy as np

from keras_dml import ops, validation

__all__ = ["nmi"]


def nmi(embeddings, labels, seed=0, n_init=1, normalize=True):
    """Normalised mutual information between k-means clusters and the classes.

    Runs scikit-learn's `KMeans` with as many clusters as there are classes,
    then `normalized_mutual_info_score` (arithmetic normalisation).

    Args:
        embeddings: float (N, d) array or tensor.
        labels: (N,) class ids.
        seed: k-means random state. Defaults to 0.
        n_init: k-means restarts. Defaults to 1.
        normalize: L2-normalise embeddings first (cosine geometry). Defaults to
            True.

    Returns:
        float in [0, 1].

    Examples:
        >>> nmi(np.eye(4, dtype="float32"), [0, 1, 2, 3])
        1.0

    Reference:
        Schütze et al., "Introduction to Information Retrieval", 2008 (NMI);
        Song et al., "Deep Metric Learning via Lifted Structured Feature
        Embedding", CVPR 2016 (its use in DML).
    """
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score

    x = validation.embedding_array(embeddings)
    y = validation.label_array(labels, x.shape[0])
    num_classes = len(np.unique(y))
    if num_classes < 2:
        raise ValueError(f"nmi needs at least 2 classes, got {num_classes}.")
    if normalize:
        x = ops.unit_rows(x)
    clusters = KMeans(n_clusters=num_classes, n_init=n_init, random_state=seed).fit_predict(x)
    return float(normalized_mutual_info_score(y, clusters))
