"""Slow NumPy loops (float64) of the margin-softmax, circle, contrastive, Smooth-AP and
multiple-negatives ranking losses, written from the papers' equations.

Each returns the batch loss as Keras reduces it (mean over anchors unless stated).
"""

import math

import numpy as np


def unit(x):
    x = np.asarray(x, np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def cosine(x, y=None):
    x = unit(x)
    return x @ (x if y is None else unit(y)).T


def margin_softmax(x, labels, weights, kind, margin, scale, sub_centers=1):
    """ArcFace eq. 3 (kind "arc", margin in degrees, with the theta > pi - m fallback),
    CosFace eq. 4 (kind "cos"); sub-centre ArcFace's per-class max over sub-centres."""
    cos_all = cosine(x, weights)
    total = 0.0
    for i, y in enumerate(labels):
        classes = [max(cos_all[i, c * sub_centers + k] for k in range(sub_centers))
                   for c in range(len(weights) // sub_centers)]
        own = classes[y]
        if kind == "arc":
            m = math.radians(margin)
            theta = math.acos(min(1.0, max(-1.0, own)))
            target = math.cos(theta + m) if theta <= math.pi - m else own - m * math.sin(m)
        else:
            target = own - margin
        logits = [scale * (target if c == y else cos_c) for c, cos_c in enumerate(classes)]
        total += -logits[y] + math.log(sum(math.exp(z - max(logits)) for z in logits)) + max(
            logits)
    return total / len(labels)


def circle(x, labels, margin=0.4, gamma=80.0):
    """Circle loss eq. 6-8 (pair form); anchors without P or N give 0; mean over N."""
    s, n, total = cosine(x), len(labels), 0.0
    for i in range(n):
        pos = [s[i, j] for j in range(n) if j != i and labels[j] == labels[i]]
        neg = [s[i, j] for j in range(n) if labels[j] != labels[i]]
        if not pos or not neg:
            continue
        pull = sum(math.exp(-gamma * max(0.0, 1 + margin - sp) * (sp - (1 - margin)))
                   for sp in pos)
        push = sum(math.exp(gamma * max(0.0, sn + margin) * (sn - margin)) for sn in neg)
        total += math.log1p(pull * push)
    return total / n


def supcon(x, labels, temperature=0.1):
    """Khosla et al. eq. 2 (L_out); anchors without a positive give 0; mean over N."""
    s, n, total = cosine(x) / temperature, len(labels), 0.0
    for i in range(n):
        pos = [j for j in range(n) if j != i and labels[j] == labels[i]]
        if not pos:
            continue
        denominator = sum(math.exp(s[i, a]) for a in range(n) if a != i)
        total += -sum(math.log(math.exp(s[i, p]) / denominator) for p in pos) / len(pos)
    return total / n


def ntxent(x, labels, temperature=0.07):
    """SimCLR eq. 1 per positive pair, mean over each anchor's positives, then anchors."""
    s, n, total = cosine(x) / temperature, len(labels), 0.0
    for i in range(n):
        pos = [j for j in range(n) if j != i and labels[j] == labels[i]]
        neg = [j for j in range(n) if labels[j] != labels[i]]
        if not pos:
            continue
        terms = [-math.log(math.exp(s[i, p]) / (math.exp(s[i, p]) + sum(math.exp(s[i, k])
                                                                          for k in neg)))
                 for p in pos]
        total += sum(terms) / len(pos)
    return total / n


def smooth_ap(x, labels, temperature=0.01, include_anchor=True):
    """Brown et al. eq. 9-10: mean over anchors of 1 - smoothed AP."""
    s, n, total = cosine(x), len(labels), 0.0

    def g(v):
        return 1.0 / (1.0 + math.exp(-v / temperature))

    for q in range(n):
        pos = [j for j in range(n) if labels[j] == labels[q] and (include_anchor or j != q)]
        every = [j for j in range(n) if include_anchor or j != q]
        if not pos:
            continue
        ap = 0.0
        for i in pos:
            above_pos = 1 + sum(g(s[q, j] - s[q, i]) for j in pos if j != i)
            above_all = 1 + sum(g(s[q, j] - s[q, i]) for j in every if j != i)
            ap += above_pos / above_all
        total += 1.0 - ap / len(pos)
    return total / n


def multiple_negatives_ranking(pairs, labels, scale=20.0, symmetric=False):
    """Henderson et al. eq. 3 on rows (query | positive); same-label rows are not negatives."""
    d = pairs.shape[1] // 2
    s = scale * cosine(pairs[:, :d], pairs[:, d:])
    n = len(labels)

    def direction(m):
        total = 0.0
        for i in range(n):
            pool = [m[i, i]] + [m[i, j] for j in range(n) if labels[j] != labels[i]]
            top = max(pool)
            total += top + math.log(sum(math.exp(z - top) for z in pool)) - m[i, i]
        return total / n

    forward = direction(s)
    return forward if not symmetric else (forward + direction(s.T)) / 2
