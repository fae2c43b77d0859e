"""Slow, obvious NumPy loops of every loss, written from the papers' equations.

Float64 on purpose, loops over anchors and pairs rather than matrix algebra, so
each line can be checked against its equation. Each loss function returns the
batch loss as Keras reduces it (mean over anchors, unless its docstring says
otherwise); some also return the paper's stated weights or gradient.

Sections: pair and triplet losses (unified view, weighted contrastive); N-pair,
NCA, histogram, margin and balanced contrastive; instance cross entropy; proxy
losses and log-ratio. The margin-softmax (ArcFace, CosFace) and pair-family
(Circle, SupCon, NT-Xent, Smooth-AP, multiple-negatives ranking) losses are in
reference_margin_softmax_and_pair_family.py; data pipelines, retrieval metrics and
export have their own reference_*.py.
"""

import math

import numpy as np

# --- pair and triplet losses ------------------------------------------------


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

# --- N-pair, NCA, histogram, margin, balanced contrastive -------------------


def _dot(embeddings):
    x = np.asarray(embeddings, np.float64)
    return x @ x.T


def similarity(embeddings, metric):
    if metric == "cosine":
        return cosine(embeddings)
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
    s = cosine(embeddings)
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
    s = cosine(embeddings)
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
    s = cosine(embeddings)
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

# --- instance cross entropy -------------------------------------------------
# Wang et al., "Instance Cross Entropy for Deep Metric Learning": eq. 3-5 (value),
# eq. 11-14 (normalised weights), eq. 16-17 (two samples per class); every
# probability in the paper's own form (eq. 11's first expression for 1 - p^).


def ice_loss(labels, similarity, scale):
    """Eq. 5 divided by N: (1/N) sum_a sum_{i in P(a)} -log p^(i|a), p^ from eq. 3 on s*S."""
    n = len(labels)
    total = 0.0
    for a in range(n):
        positives, negatives = sets(labels, a)
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
        positives, negatives = sets(labels, a)
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
        positives, negatives = sets(labels, a)
        (i,) = positives
        negative_sum = sum(np.exp(scale * similarity[a, j]) for j in negatives)
        denominator = np.exp(scale * similarity[a, i]) + negative_sum
        one_minus_p = negative_sum / denominator
        w[a, i] = 1.0 / (2 * n)
        for j in negatives:
            p_j = np.exp(scale * similarity[a, j]) / denominator
            w[a, j] = p_j / one_minus_p / (2 * n)
    return w

# --- proxy losses and log-ratio ---------------------------------------------
# Batch loss with Keras' default reduction (mean over samples, or the batch-global
# value for Proxy Anchor) and, where the paper states one, the gradient with
# respect to the similarity matrix.


def unit(x):
    x = np.asarray(x, np.float64)
    norms = np.sqrt((x * x).sum(axis=1, keepdims=True))
    return x / np.maximum(norms, 1e-12)


def cosine_to(embeddings, proxies):
    return unit(embeddings) @ unit(proxies).T


def proxy_anchor(embeddings, labels, proxies, alpha=32.0, delta=0.1):
    """Slides, "Details of Proxy Anchor Loss": value and dL/dS by the hardness formula."""
    s = cosine_to(embeddings, proxies)
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
    s = cosine_to(embeddings, proxies)
    losses = []
    for i in range(len(s)):
        logits = [s[i, c] / temperature for c in range(s.shape[1])]
        top = max(logits)
        log_sum = top + math.log(sum(math.exp(z - top) for z in logits))
        losses.append(log_sum - logits[labels[i]])
    return float(np.mean(losses))


def soft_triple(embeddings, labels, centers, k, la=20.0, gamma=0.1, tau=0.2, margin=0.01):
    """SoftTriple (Qian et al. 2019) with the authors' centre regulariser; centres (C K, d)."""
    s = cosine_to(embeddings, centers)
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
