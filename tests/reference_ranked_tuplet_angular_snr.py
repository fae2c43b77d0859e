"""Slow NumPy loops (float64) of Ranked List, Tuplet Margin, Angular, Intra-Pair
Variance and SNR contrastive, written from the papers' equations with
pytorch-metric-learning 2.9's reductions (each docstring says which).

Loops over anchors, pairs and negatives, no matrix algebra, so each line can be read
against its equation. `REFERENCES` maps each loss name to its loop for the
registry's example (tests/backend_checks.py).
"""

import math

import numpy as np


def unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cosine(x):
    x = unit(x)
    return x @ x.T


def euclidean(x):
    x = np.asarray(x, np.float64)
    return np.sqrt(((x[:, None, :] - x[None, :, :]) ** 2).sum(-1))


def metric_matrix(x, metric):
    if metric == "cosine":
        return cosine(x)
    if metric == "dot":
        return np.asarray(x, np.float64) @ np.asarray(x, np.float64).T
    if metric == "euclidean":
        return euclidean(x)
    return euclidean(x) ** 2


def positive_pairs(labels):
    n = len(labels)
    return [(a, p) for a in range(n) for p in range(n) if a != p and labels[a] == labels[p]]


def negative_pairs(labels):
    n = len(labels)
    return [(a, b) for a in range(n) for b in range(n) if labels[a] != labels[b]]


def tuplet_margin(x, labels, margin_degrees=5.73, scale=64.0):
    """Yu and Tao 2019: log(1 + sum_n exp(s (cos theta_an - cos(theta_ap - m)))), the
    mean over positive pairs."""
    s, m = cosine(x), math.radians(margin_degrees)
    losses = []
    for a, p in positive_pairs(labels):
        theta = math.acos(min(1.0, max(-1.0, s[a, p])))
        total = sum(math.exp(scale * (s[a, n] - math.cos(theta - m)))
                    for n in range(len(labels)) if labels[n] != labels[a])
        losses.append(math.log1p(total))
    return float(np.mean(losses)) if losses else 0.0


def angular(x, labels, alpha_degrees=40.0):
    """Wang et al. 2017, N-pair form on unit vectors: log(1 + sum_n exp(4 tan^2 alpha
    (x_a + x_p)^T x_n - 2 (1 + tan^2 alpha) x_a^T x_p)), the mean over positive pairs."""
    u, t = unit(x), math.tan(math.radians(alpha_degrees)) ** 2
    losses = []
    for a, p in positive_pairs(labels):
        total = sum(math.exp(4 * t * (u[a] + u[p]) @ u[n] - 2 * (1 + t) * u[a] @ u[p])
                    for n in range(len(labels)) if labels[n] != labels[a])
        losses.append(math.log1p(total))
    return float(np.mean(losses)) if losses else 0.0


def intra_pair_variance(x, labels, pos_eps=0.01, neg_eps=0.01, metric="cosine"):
    """Yu and Tao 2019: each set's squared hinges around (1 -+ eps) its mean, the mean
    over the set; directions flipped on distances."""
    d = metric_matrix(x, metric)
    distance = metric in ("euclidean", "squared_euclidean")
    pos = [d[a, p] for a, p in positive_pairs(labels)]
    neg = [d[a, n] for a, n in negative_pairs(labels)]
    total = 0.0
    if pos:
        mean = np.mean(pos)
        hinges = [max(0.0, v - (1 + pos_eps) * mean) if distance
                  else max(0.0, (1 - pos_eps) * mean - v) for v in pos]
        total += np.mean(np.square(hinges))
    if neg:
        mean = np.mean(neg)
        hinges = [max(0.0, (1 - neg_eps) * mean - v) if distance
                  else max(0.0, v - (1 + neg_eps) * mean) for v in neg]
        total += np.mean(np.square(hinges))
    return float(total)


def ranked_list(x, labels, margin=0.4, tn=10.0, imbalance=0.5, alpha=None, tp=0.0,
                metric="cosine"):
    """Wang et al. 2019: per anchor, weighted means of the violations of the positives
    beyond alpha - m and the negatives within alpha; PML 2.9's denominators add 1e-5
    per column. The mean over anchors."""
    alpha = 1 + margin / 2 if alpha is None else alpha
    points = unit(x) if metric == "cosine" else np.asarray(x, np.float64)
    d, n = euclidean(points), len(labels)
    total = 0.0
    for a in range(n):
        pos = [d[a, j] - (alpha - margin) for j in range(n)
               if j != a and labels[j] == labels[a] and d[a, j] > alpha - margin]
        neg = [alpha - d[a, k] for k in range(n) if labels[k] != labels[a] and d[a, k] < alpha]
        w_pos = [math.exp(tp * v) for v in pos]
        w_neg = [math.exp(tn * v) for v in neg]
        loss_p = sum(w * v for w, v in zip(w_pos, pos)) / (sum(w_pos) + n * 1e-5)
        loss_n = sum(w * v for w, v in zip(w_neg, neg)) / (sum(w_neg) + n * 1e-5)
        total += (1 - imbalance) * loss_p + imbalance * loss_n
    return total / n


def snr_distance(x, i, j, normalize=True):
    """var(x_j - x_i) / var(x_i) (Yuan et al. 2019), on unit vectors with `normalize`."""
    points = unit(x) if normalize else np.asarray(x, np.float64)
    return np.var(points[j] - points[i]) / np.var(points[i])


def snr_contrastive(x, labels, pos_margin=0.0, neg_margin=1.0, normalize=True):
    """Contrastive loss on the SNR distance: the mean of the non-zero positive hinges
    plus the mean of the non-zero negative hinges (PML's AvgNonZeroReducer)."""
    pos = [max(0.0, snr_distance(x, a, p, normalize) - pos_margin)
           for a, p in positive_pairs(labels)]
    neg = [max(0.0, neg_margin - snr_distance(x, a, n, normalize))
           for a, n in negative_pairs(labels)]
    pos, neg = [v for v in pos if v > 0], [v for v in neg if v > 0]
    return float((np.mean(pos) if pos else 0.0) + (np.mean(neg) if neg else 0.0))


#: Loss name -> fn(loss, labels, embeddings as float64) -> the batch value.
REFERENCES = {
    "Angular": lambda loss, y, x: angular(x, y, loss.alpha),
    "IntraPairVariance": lambda loss, y, x: intra_pair_variance(
        x, y, loss.pos_eps, loss.neg_eps, loss.metric),
    "RankedList": lambda loss, y, x: ranked_list(
        x, y, loss.margin, loss.Tn, loss.imbalance, loss.alpha, loss.Tp, loss.metric),
    "SignalToNoiseRatioContrastive": lambda loss, y, x: snr_contrastive(
        x, y, loss.pos_margin, loss.neg_margin, loss.normalize),
    "TupletMargin": lambda loss, y, x: tuplet_margin(x, y, loss.margin, loss.scale),
}
