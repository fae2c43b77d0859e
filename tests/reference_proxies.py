"""Slow, obvious NumPy loops of the proxy losses and the log-ratio loss, from the papers.

Float64 on purpose. Each function returns the batch loss (Keras' default reduction:
mean over samples, or the batch-global value for Proxy Anchor) and, where the
paper states one, the gradient with respect to the similarity matrix.
"""

import math

import numpy as np


def unit(x):
    x = np.asarray(x, np.float64)
    norms = np.sqrt((x * x).sum(axis=1, keepdims=True))
    return x / np.maximum(norms, 1e-12)


def cosine(embeddings, proxies):
    return unit(embeddings) @ unit(proxies).T


def proxy_anchor(embeddings, labels, proxies, alpha=32.0, delta=0.1):
    """Slides, "Details of Proxy Anchor Loss": value and dL/dS by the hardness formula."""
    s = cosine(embeddings, proxies)
    n, c = s.shape
    with_positive = [p for p in range(c) if any(labels[i] == p for i in range(n))]
    pos_total, neg_total = 0.0, 0.0
    grad = np.zeros((n, c))
    for p in range(c):
        positives = [i for i in range(n) if labels[i] == p]
        negatives = [i for i in range(n) if labels[i] != p]
        h_pos = {i: math.exp(-alpha * (s[i, p] - delta)) for i in positives}
        h_neg = {i: math.exp(alpha * (s[i, p] + delta)) for i in negatives}
        if positives:
            pos_total += math.log(1.0 + sum(h_pos.values()))
        neg_total += math.log(1.0 + sum(h_neg.values()))
        for i in positives:
            grad[i, p] = -alpha / len(with_positive) * h_pos[i] / (1.0 + sum(h_pos.values()))
        for i in negatives:
            grad[i, p] = alpha / c * h_neg[i] / (1.0 + sum(h_neg.values()))
    value = (pos_total / len(with_positive) if with_positive else 0.0) + neg_total / c
    return value, grad


def proxy_nca(embeddings, labels, proxies, scale=1.0):
    """Slides, "Proxy NCA loss", on unit vectors with squared Euclidean D, scaled by s."""
    f, p = unit(embeddings), unit(proxies)
    losses = []
    for i in range(len(f)):
        d = [float(((f[i] - p[k]) ** 2).sum()) for k in range(len(p))]
        negatives = [math.exp(-scale * d[k]) for k in range(len(p)) if k != labels[i]]
        if negatives:
            losses.append(scale * d[labels[i]] + math.log(sum(negatives)))
        else:
            losses.append(scale * d[labels[i]])
    return float(np.mean(losses))


def normalized_softmax(embeddings, labels, proxies, temperature=0.05):
    """ICE paper eq. 1 on L2-normalised features and class weights, logits / T."""
    s = cosine(embeddings, proxies)
    losses = []
    for i in range(len(s)):
        logits = [s[i, c] / temperature for c in range(s.shape[1])]
        top = max(logits)
        log_sum = top + math.log(sum(math.exp(z - top) for z in logits))
        losses.append(log_sum - logits[labels[i]])
    return float(np.mean(losses))


def soft_triple(embeddings, labels, centers, k, la=20.0, gamma=0.1, tau=0.2, margin=0.01):
    """SoftTriple (Qian et al. 2019) with the authors' centre regulariser; centres (C K, d)."""
    s = cosine(embeddings, centers)
    c = s.shape[1] // k
    losses = []
    for i in range(len(s)):
        relaxed = []
        for cls in range(c):
            sims = [s[i, cls * k + j] for j in range(k)]
            weights = [math.exp(v / gamma) for v in sims]
            relaxed.append(sum(w * v for w, v in zip(weights, sims)) / sum(weights))
        logits = [la * (relaxed[cls] - (margin if cls == labels[i] else 0.0)) for cls in range(c)]
        top = max(logits)
        log_sum = top + math.log(sum(math.exp(z - top) for z in logits))
        losses.append(log_sum - logits[labels[i]])
    value = float(np.mean(losses))
    if tau > 0 and k > 1:
        w = unit(centers)
        total = 0.0
        for cls in range(c):
            for a in range(k):
                for b in range(a + 1, k):
                    dot = float(w[cls * k + a] @ w[cls * k + b])
                    total += math.sqrt(2.0 + 1e-5 - 2.0 * dot)
        value += tau * total / (c * k * (k - 1))
    return value


def log_ratio(embeddings, label_distances, max_partners=None, epsilon=1e-6):
    """Log-ratio loss (Kim et al. 2019), dense triplets: every anchor, every pair {i, j}.

    `label_distances` is the (N, N) matrix D_y. With `max_partners`, an anchor uses
    only its nearest partners in label space (ties by index).
    """
    f = np.asarray(embeddings, np.float64)
    dy = np.asarray(label_distances, np.float64)
    n = len(f)
    per_anchor = []
    for a in range(n):
        others = [i for i in range(n) if i != a]
        if max_partners is not None:
            others = sorted(others, key=lambda i: (dy[a, i], i))[:max_partners]
        terms = []
        for x in range(len(others)):
            for y in range(x + 1, len(others)):
                i, j = others[x], others[y]
                d_ai = float(((f[a] - f[i]) ** 2).sum())
                d_aj = float(((f[a] - f[j]) ** 2).sum())
                ratio = math.log(d_ai + epsilon) - math.log(d_aj + epsilon)
                label_ratio = math.log(dy[a, i] + epsilon) - math.log(dy[a, j] + epsilon)
                terms.append((ratio - label_ratio) ** 2)
        per_anchor.append(float(np.mean(terms)) if terms else 0.0)
    return float(np.mean(per_anchor))


def squared_euclidean(y):
    y = np.asarray(y, np.float64)
    return ((y[:, None, :] - y[None, :, :]) ** 2).sum(axis=2)
