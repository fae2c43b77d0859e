"""Slow, obvious NumPy loops for instance cross entropy, written from the paper.

Wang et al., "Instance Cross Entropy for Deep Metric Learning": eq. 3-5 (value),
eq. 11-14 (normalised weights), eq. 16-17 (two samples per class). Float64; every
probability is written in the paper's own form (eq. 11's first expression for
1 - p^), so nothing cancels.
"""

import numpy as np


def cosine_matrix(embeddings):
    x = np.asarray(embeddings, np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


def _sets(labels, a):
    positives = [i for i in range(len(labels)) if labels[i] == labels[a] and i != a]
    negatives = [j for j in range(len(labels)) if labels[j] != labels[a]]
    return positives, negatives


def ice_loss(labels, similarity, scale):
    """Eq. 5 divided by N: (1/N) sum_a sum_{i in P(a)} -log p^(i|a), p^ from eq. 3 on s*S."""
    n = len(labels)
    total = 0.0
    for a in range(n):
        positives, negatives = _sets(labels, a)
        negative_sum = sum(np.exp(scale * similarity[a, j]) for j in negatives)
        for i in positives:
            positive_term = np.exp(scale * similarity[a, i])
            p = positive_term / (positive_term + negative_sum)  # eq. 3
            total += -np.log(p)
    return total / n


def ice_weights(labels, similarity, scale):
    """w_bar of eq. 13-14 as an (N, N) matrix (positive numbers; zero off the pairs)."""
    n = len(labels)
    w = np.zeros((n, n))
    for a in range(n):
        positives, negatives = _sets(labels, a)
        if not positives or not negatives:
            continue
        negative_sum = sum(np.exp(scale * similarity[a, j]) for j in negatives)
        one_minus_p = {}  # eq. 11: w^(i; a) = sum_neg / (exp(s S_ai) + sum_neg) = 1 - p^(i|a)
        for i in positives:
            one_minus_p[i] = negative_sum / (np.exp(scale * similarity[a, i]) + negative_sum)
        denominator = sum(one_minus_p.values())
        for i in positives:
            w[a, i] = one_minus_p[i] / (2 * n * denominator)  # eq. 13
        for j in negatives:
            total = 0.0
            for i in positives:  # eq. 12: sum_i p^(j|a,i), eq. 4 on s*S
                total += np.exp(scale * similarity[a, j]) / (
                    np.exp(scale * similarity[a, i]) + negative_sum
                )
            w[a, j] = total / (2 * n * denominator)  # eq. 14
    return w


def ice_gradient(labels, similarity, scale):
    """dL/dS as the paper's backward pass defines it: -w_bar on positives, +w_bar on negatives."""
    labels = np.asarray(labels)
    same = labels[:, None] == labels[None, :]
    w = ice_weights(labels, similarity, scale)
    return np.where(same, -w, w)


def ice_weights_two_per_class(labels, similarity, scale):
    """Eq. 16-17 (every class twice): 1/(2N) per positive, (1/2N) p^(j|a,i)/(1-p^(i|a))."""
    n = len(labels)
    w = np.zeros((n, n))
    for a in range(n):
        positives, negatives = _sets(labels, a)
        (i,) = positives
        negative_sum = sum(np.exp(scale * similarity[a, j]) for j in negatives)
        denominator = np.exp(scale * similarity[a, i]) + negative_sum
        one_minus_p = negative_sum / denominator
        w[a, i] = 1.0 / (2 * n)
        for j in negatives:
            p_j = np.exp(scale * similarity[a, j]) / denominator
            w[a, j] = p_j / one_minus_p / (2 * n)
    return w
