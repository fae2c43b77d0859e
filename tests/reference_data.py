"""Slow, obvious NumPy references for keras_dml.data (from the papers' text)."""

from math import comb

import numpy as np


def group_design_q(y_i, y_j, counts, m, n):
    """Q^group_{m,n}(i, j) built from the binomial argument of section 4.2.

    P(both samples in the batch) times 1 / (mn(mn - 1)), the chance of
    choosing the ordered pair among the batch's pairs.
    """
    classes = int((counts > 0).sum())
    pick = 1.0 / (m * n * (m * n - 1))
    if y_i == y_j:
        c = counts[y_i]
        classes_in = comb(classes - 1, n - 1) / comb(classes, n)
        both = comb(c - 2, m - 2) / comb(c, m)
        return classes_in * both * pick
    classes_in = comb(classes - 2, n - 2) / comb(classes, n)
    a = comb(counts[y_i] - 1, m - 1) / comb(counts[y_i], m)
    b = comb(counts[y_j] - 1, m - 1) / comb(counts[y_j], m)
    return classes_in * a * b * pick


def random_design_q(y_i, y_j, counts, p):
    """Q^random_p(i, j) from the sampling steps of section 4.1."""
    classes = len(counts)
    if y_i == y_j:
        return p / classes / (counts[y_i] * (counts[y_i] - 1))
    return (1 - p) / (classes * (classes - 1)) / (counts[y_i] * counts[y_j])


def contrastive_terms(a, b, same, margin):
    """Eq. 4-5: Y d^2 + (1 - Y) max(0, margin - d)^2 for embeddings a, b."""
    d = np.sqrt(np.maximum(((a - b) ** 2).sum(-1), 0.0))
    return np.where(same, d ** 2, np.maximum(0.0, margin - d) ** 2)


def full_contrastive_mean(emb, labels, margin):
    """Mean of the contrastive term over all N(N - 1) ordered pairs (loop over rows)."""
    total, n = 0.0, len(labels)
    for i in range(n):
        terms = contrastive_terms(emb[i], emb, labels[i] == labels, margin)
        terms[i] = 0.0
        total += terms.sum()
    return total / (n * (n - 1))
