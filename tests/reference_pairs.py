"""Slow, obvious NumPy loops of the pair and triplet losses, written from the papers.

Each function takes float64 embeddings (N, d) and integer labels (N,) and returns
the batch loss with Keras' default reduction (mean over anchors), or the kept
pairs / triplets for the miners.
"""

import numpy as np


def cosine(x):
    x = np.asarray(x, np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x @ x.T


def euclidean(x):
    x = np.asarray(x, np.float64)
    return np.sqrt(np.maximum(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1), 0.0))


def closeness(x, distance):
    """Similarity-like matrix: S, -D or -D^2."""
    if distance == "cosine":
        return cosine(x)
    if distance == "euclidean":
        return -euclidean(x)
    return -euclidean(x) ** 2


def sets(labels, i):
    n = len(labels)
    positives = [j for j in range(n) if j != i and labels[j] == labels[i]]
    negatives = [j for j in range(n) if labels[j] != labels[i]]
    return positives, negatives


def contrastive(x, labels, distance="cosine", pos_margin=None, neg_margin=None):
    """Unified view eq. 5 (cosine) / weighted contrastive eq. 4-5 (euclidean)."""
    n, total = len(labels), 0.0
    if distance == "cosine":
        s = cosine(x)
        pos_margin = 1.0 if pos_margin is None else pos_margin
        neg_margin = 0.5 if neg_margin is None else neg_margin
        for i in range(n):
            positives, negatives = sets(labels, i)
            total += sum(max(0.0, pos_margin - s[i, j]) for j in positives)
            total += sum(max(0.0, s[i, j] - neg_margin) for j in negatives)
    else:
        d = euclidean(x)
        pos_margin = 0.0 if pos_margin is None else pos_margin
        neg_margin = 1.0 if neg_margin is None else neg_margin
        for i in range(n):
            positives, negatives = sets(labels, i)
            total += sum(max(0.0, d[i, j] - pos_margin) ** 2 for j in positives)
            total += sum(max(0.0, neg_margin - d[i, j]) ** 2 for j in negatives)
    return total / n


def triplets(x, labels, distance="cosine", mining="all"):
    """The triplet set T of each mining strategy, as (a, p, n) tuples."""
    c = closeness(x, distance)
    result = []
    for a in range(len(labels)):
        positives, negatives = sets(labels, a)
        if not positives or not negatives:
            continue
        if mining == "all":
            result += [(a, p, q) for p in positives for q in negatives]
        elif mining == "semihard":
            for p in positives:
                farther = [q for q in negatives if c[a, q] < c[a, p]]
                if farther:
                    result.append((a, p, max(farther, key=lambda q: c[a, q])))
        else:
            hardest_n = max(negatives, key=lambda q: c[a, q])
            pick = max if mining == "easy" else min
            result.append((a, pick(positives, key=lambda p: c[a, p]), hardest_n))
    return result


def triplet(x, labels, margin, distance="cosine", mining="all", miner_margin=None):
    """Weighted contrastive eq. 1: mean over T of [c_an - c_ap + margin]_+."""
    c = closeness(x, distance)
    kept = triplets(x, labels, distance, mining)
    if miner_margin is not None:
        kept = [(a, p, q) for a, p, q in kept if c[a, q] > c[a, p] - miner_margin]
    if not kept:
        return 0.0
    return sum(max(0.0, c[a, q] - c[a, p] + margin) for a, p, q in kept) / len(kept)


def lifted_structure(x, labels, margin=1.0, distance="euclidean"):
    """Oh Song et al. 2016 eq. 4 over unordered positive pairs."""
    c = closeness(x, distance)
    n, total, pairs = len(labels), 0.0, 0
    for i in range(n):
        for j in range(i + 1, n):
            if labels[i] != labels[j]:
                continue
            terms = [np.exp(margin + c[i, k]) for k in range(n) if labels[k] != labels[i]]
            terms += [np.exp(margin + c[j, k]) for k in range(n) if labels[k] != labels[j]]
            if not terms:
                continue
            pairs += 1
            total += max(0.0, np.log(sum(terms)) - c[i, j]) ** 2
    return total / (2 * pairs) if pairs else 0.0


def generalized_lifted(x, labels, margin=1.0, distance="cosine"):
    """Unified view eq. 9."""
    c = closeness(x, distance)
    n, total = len(labels), 0.0
    for i in range(n):
        positives, negatives = sets(labels, i)
        if not positives or not negatives:
            continue
        inside = (margin + np.log(sum(np.exp(-c[i, k]) for k in positives))
                  + np.log(sum(np.exp(c[i, k]) for k in negatives)))
        total += max(0.0, inside)
    return total / n


def binomial(x, labels, alpha=2.0, beta=50.0, base=0.5):
    """Unified view eq. 12, divided by m (Keras' mean)."""
    s = cosine(x)
    n, total = len(labels), 0.0
    for i in range(n):
        positives, negatives = sets(labels, i)
        if positives:
            total += sum(np.log1p(np.exp(alpha * (base - s[i, k]))) for k in positives) / (
                alpha * len(positives))
        if negatives:
            total += sum(np.log1p(np.exp(beta * (s[i, k] - base))) for k in negatives) / (
                beta * len(negatives))
    return total / n


def bin_lifted_weights(x, labels, alpha=2.0, beta=50.0, base=0.5):
    """MS supplementary eq. 10 (and its positive analogue), per anchor, before 1/m."""
    s = cosine(x)
    n = len(labels)
    w = np.zeros((n, n))
    for i in range(n):
        positives, negatives = sets(labels, i)
        for j in negatives:
            binomial_part = 1.0 / (1.0 + np.exp(-beta * (s[i, j] - base)))
            lifted_part = np.exp(beta * s[i, j]) / sum(np.exp(beta * s[i, k]) for k in negatives)
            w[i, j] = 0.5 * (binomial_part + lifted_part)
        for j in positives:
            binomial_part = 1.0 / (1.0 + np.exp(-alpha * (base - s[i, j])))
            lifted_part = np.exp(-alpha * s[i, j]) / sum(
                np.exp(-alpha * s[i, k]) for k in positives)
            w[i, j] = 0.5 * (binomial_part + lifted_part)
    return w


def bin_lifted(x, labels, alpha=2.0, beta=50.0, base=0.5):
    """The loss whose derivative is eq. 10, per anchor, mean over anchors."""
    s = cosine(x)
    n, total = len(labels), 0.0
    for i in range(n):
        positives, negatives = sets(labels, i)
        part = sum(np.log1p(np.exp(alpha * (base - s[i, k]))) / alpha for k in positives)
        part += sum(np.log1p(np.exp(beta * (s[i, k] - base))) / beta for k in negatives)
        if positives:
            part += np.log(sum(np.exp(-alpha * s[i, k]) for k in positives)) / alpha
        if negatives:
            part += np.log(sum(np.exp(beta * s[i, k]) for k in negatives)) / beta
        total += 0.5 * part
    return total / n


def vthm(x, labels, epsilon=0.1):
    """Valid-triplet hard mining (unified view section 5.1): kept (P_i, N_i) per anchor."""
    s = cosine(x)
    kept = []
    for i in range(len(labels)):
        positives, negatives = sets(labels, i)
        if not positives or not negatives:
            kept.append(([], []))
            continue
        hardest_p = min(s[i, k] for k in positives)
        hardest_n = max(s[i, k] for k in negatives)
        kept.append(([j for j in positives if s[i, j] < hardest_n + epsilon],
                     [j for j in negatives if s[i, j] > hardest_p - epsilon]))
    return kept


def multi_similarity(x, labels, alpha=2.0, beta=50.0, base=0.5, epsilon=0.1, mining=True):
    """Unified view eq. 17 (RAW), with VTHM when `mining`."""
    s = cosine(x)
    n, total = len(labels), 0.0
    kept = vthm(x, labels, epsilon) if mining else [sets(labels, i) for i in range(n)]
    for i, (positives, negatives) in enumerate(kept):
        total += np.log(1.0 + sum(np.exp(-alpha * (s[i, k] - base)) for k in positives)) / alpha
        total += np.log(1.0 + sum(np.exp(beta * (s[i, k] - base)) for k in negatives)) / beta
    return total / n


def pair_margin(x, labels, pos_margin, neg_margin):
    s = cosine(x)
    n = len(labels)
    positive = np.zeros((n, n), bool)
    negative = np.zeros((n, n), bool)
    for i in range(n):
        positives, negatives = sets(labels, i)
        for j in positives:
            positive[i, j] = s[i, j] < pos_margin
        for j in negatives:
            negative[i, j] = s[i, j] > neg_margin
    return positive, negative
