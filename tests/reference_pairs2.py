"""Slow, obvious NumPy loops written from the papers' equations (float64).

N-pair, NCA, histogram, margin and balanced contrastive losses, and the
unit-sphere distance density of distance weighted sampling. Each function takes
plain arrays and returns the batch loss as Keras reduces it (mean over anchors
unless stated otherwise).
"""

import math

import numpy as np

from reference_pairs import cosine as _cosine


def _dot(embeddings):
    x = np.asarray(embeddings, np.float64)
    return x @ x.T


def similarity(embeddings, metric):
    if metric == "cosine":
        return _cosine(embeddings)
    if metric == "dot":
        return _dot(embeddings)
    x = np.asarray(embeddings, np.float64)
    squared = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    return squared if metric == "squared_euclidean" else np.sqrt(squared)


def npair(labels, embeddings, l2_penalty=0.002, metric="dot"):
    """Weighted contrastive eq. 2: one tuple (a, p, all negatives of a) per positive."""
    s = similarity(embeddings, metric)
    n = len(labels)
    total = 0.0
    for a in range(n):
        positives = [p for p in range(n) if p != a and labels[p] == labels[a]]
        negatives = [k for k in range(n) if labels[k] != labels[a]]
        anchor = 0.0
        if positives and negatives:
            for p in positives:
                denominator = math.exp(s[a, p]) + sum(math.exp(s[a, k]) for k in negatives)
                anchor += -math.log(math.exp(s[a, p]) / denominator)
            anchor /= len(positives)
        norm = float(np.sum(np.asarray(embeddings, np.float64)[a] ** 2))
        total += anchor + l2_penalty * norm
    return total / n


def npair_mc(labels, embeddings, l2_penalty=0.002, metric="dot"):
    """Sohn's N-pair-mc: each class's first two samples are its (anchor, positive);
    anchor c's negatives are the other classes' positives; mean over the pairs."""
    s = similarity(embeddings, metric)
    pairs = []
    for label in dict.fromkeys(labels.tolist()):
        members = [i for i in range(len(labels)) if labels[i] == label]
        if len(members) >= 2:
            pairs.append((members[0], members[1]))
    total = 0.0
    if len(pairs) >= 2:
        for anchor, positive in pairs:
            denominator = sum(math.exp(s[anchor, other]) for _, other in pairs)
            total += -math.log(math.exp(s[anchor, positive]) / denominator)
        total /= len(pairs)
    norms = np.sum(np.asarray(embeddings, np.float64) ** 2, axis=1)
    return total + l2_penalty * float(np.mean(norms))


def nca(labels, embeddings, scale=1.0, metric="cosine"):
    """MS supplementary eq. 1 as a loss: -log(sum_same exp / sum_all exp), k != a."""
    s = similarity(embeddings, metric)
    logits = scale * (s if metric in ("cosine", "dot") else -s)
    n = len(labels)
    total = 0.0
    for a in range(n):
        same = sum(math.exp(logits[a, k]) for k in range(n) if k != a and labels[k] == labels[a])
        every = sum(math.exp(logits[a, k]) for k in range(n) if k != a)
        if same > 0:
            total += -math.log(same / every)
    return total / n


def _delta(value, r, nodes):
    """Eq. 5: the triangular kernel of node r."""
    step = nodes[1] - nodes[0]
    if r > 0 and nodes[r - 1] <= value <= nodes[r]:
        return (value - nodes[r - 1]) / step
    if r + 1 < len(nodes) and nodes[r] <= value <= nodes[r + 1]:
        return (nodes[r + 1] - value) / step
    if r + 1 == len(nodes) and value == nodes[r]:
        return 1.0
    return 0.0


def histograms(labels, embeddings, bins):
    """Eq. 4-5 over ordered pairs i != j: (h+, h-, nodes, Delta)."""
    s = _cosine(embeddings)
    step = 2.0 / (bins - 1)
    nodes = np.array([-1.0 + r * step for r in range(bins)])
    n = len(labels)
    pos, neg = np.zeros(bins), np.zeros(bins)
    n_pos = n_neg = 0
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            target = pos if labels[i] == labels[j] else neg
            if labels[i] == labels[j]:
                n_pos += 1
            else:
                n_neg += 1
            for r in range(bins):
                target[r] += _delta(s[i, j], r, nodes)
    return pos / max(n_pos, 1), neg / max(n_neg, 1), nodes, step, n_pos, n_neg


def histogram(labels, embeddings, bins=101):
    """Eq. 3: sum_r h_r^- sum_{q <= r} h_q^+ (a scalar for the batch)."""
    h_pos, h_neg, _, _, _, _ = histograms(labels, embeddings, bins)
    return sum(h_neg[r] * sum(h_pos[q] for q in range(r + 1)) for r in range(bins))


def histogram_eq9_weights(labels, embeddings, bins=101):
    """Eq. 9 and its mirror: dL/dS_ij for every ordered pair, written from the paper."""
    h_pos, h_neg, nodes, step, n_pos, n_neg = histograms(labels, embeddings, bins)
    s = _cosine(embeddings)
    n = len(labels)
    w = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            if i == j:
                continue
            p = min(int(math.floor((s[i, j] + 1.0) / step)), bins - 2)
            if labels[i] == labels[j]:
                w[i, j] = -h_neg[p] / (step * n_pos)
            else:
                w[i, j] = h_pos[p + 1] / (step * n_neg)
    return w


def margin(labels, embeddings, alpha=0.2, beta=1.2, nu=0.0, pairs=None, average="pairs"):
    """Weighted contrastive eq. 3 with Wu et al.'s nu penalty, on the unit sphere.

    `beta` is a float or a per-class array (beta_i = beta[y_i]); `pairs` the set
    of kept ordered (i, j) pairs (default: every i != j).
    1/|P| sum_{(i,j) in P} [Y (D - beta_i + alpha)_+ + (1 - Y)(alpha + beta_i - D)_+
    + nu beta_i], or divided by the number of pairs with a non-zero hinge for
    average="active".
    """
    s = _cosine(embeddings)
    n = len(labels)
    if pairs is None:
        pairs = [(i, j) for i in range(n) for j in range(n) if i != j]
    total, active = 0.0, 0
    for i, j in pairs:
        b = float(beta) if np.ndim(beta) == 0 else float(beta[labels[i]])
        d = math.sqrt(max(2.0 - 2.0 * s[i, j], 0.0))
        if labels[i] == labels[j]:
            hinge = max(d - b + alpha, 0.0)
        else:
            hinge = max(alpha + b - d, 0.0)
        total += hinge + nu * b
        active += hinge > 0
    count = len(pairs) if average == "pairs" else active
    return total / count if count else 0.0


def balanced_contrastive(labels, embeddings, class_counts, lam=256.0, margin_=1.0,
                         importance=None):
    """Eq. 15 (eq. 23 with importance weights W) over the batch's sampled ordered pairs.

    g(d) = d^2, h(d) = max(0, margin - d)^2 (eq. 5) on Euclidean distances,
    eta_ij = lam / (L - 1) (N_{y_i} - 1) / N_{y_j} (eq. 16), L the number of
    non-empty classes, and the mean over the B sampled ordered pairs (eq. 23):
    every i != j without W, the pairs with W_ij > 0 with it.
    """
    x = np.asarray(embeddings, np.float64)
    n = len(labels)
    num_classes = sum(1 for c in class_counts if c > 0)
    total, sampled = 0.0, 0
    for i in range(n):
        for j in range(n):
            w = 1.0 if importance is None else float(importance[i, j])
            if i == j or w <= 0:
                continue
            sampled += 1
            d = float(np.linalg.norm(x[i] - x[j]))
            if labels[i] == labels[j]:
                total += w * d * d
            else:
                eta = lam / (num_classes - 1) * (class_counts[labels[i]] - 1) / class_counts[
                    labels[j]]
                total += w * eta * max(margin_ - d, 0.0) ** 2
    return total / sampled if sampled else 0.0


def group_importance(labels, class_counts, m, n):
    """Eq. 25: W_ij of the (m, n)-group design, 0 on the diagonal."""
    num_classes = sum(1 for c in class_counts if c > 0)
    total = sum(class_counts)
    size = len(labels)
    w = np.zeros((size, size))
    for i in range(size):
        for j in range(size):
            ni, nj = class_counts[labels[i]], class_counts[labels[j]]
            if i == j:
                continue
            if labels[i] == labels[j]:
                w[i, j] = (num_classes * (m * n - 1) * ni * (ni - 1)
                           / ((m - 1) * total * (total - 1)))
            else:
                w[i, j] = (num_classes * (num_classes - 1) * (m * n - 1) * ni * nj
                           / (m * (n - 1) * total * (total - 1)))
    return w


def log_inverse_sphere_density(distance, dim, cutoff=0.5):
    """log q(d)^-1 for d clipped below at `cutoff`: q(d) ~ d^(n-2) (1 - d^2/4)^((n-3)/2)."""
    d = max(distance, cutoff)
    return -((dim - 2) * math.log(d) + (dim - 3) / 2.0 * math.log(max(1.0 - d * d / 4.0, 1e-8)))
