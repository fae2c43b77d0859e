"""NumPy loops, written from the papers, of the pytorch-metric-learning twins FastAP,
PNP, ThresholdConsistentMargin, DynamicSoftMargin (its running histogram in and out)
and Manifold: one anchor, pair or triplet at a time. Used by their tests
(test_losses_<module>.py) and, through `REFERENCES`, by the backend contract
(backend_checks.py)."""

import keras
import numpy as np

import reference as ref

def tcm_loop(x, labels, lambda_plus=1.0, lambda_minus=1.0, margin_plus=0.9,
             margin_minus=0.5):
    """The TCM term, one ordered pair (a, b), a != b, at a time."""
    s = ref.cosine(x)
    pull, pulled, push, pushed = 0.0, 0, 0.0, 0
    for a in range(len(x)):
        for b in range(len(x)):
            if a == b:
                continue
            if labels[a] == labels[b] and s[a, b] <= margin_plus:
                pull, pulled = pull + margin_plus - s[a, b], pulled + 1
            if labels[a] != labels[b] and s[a, b] >= margin_minus:
                push, pushed = push + s[a, b] - margin_minus, pushed + 1
    return (lambda_plus * (pull / pulled if pulled else 0.0)
            + lambda_minus * (push / pushed if pushed else 0.0))


def fast_ap_loop(x, labels, num_bins=10):
    """Mean over anchors of 1 - FastAP, one anchor, bin and sample at a time."""
    d = 2.0 - 2.0 * ref.cosine(x)
    delta = 4.0 / num_bins
    losses = []
    for q in range(len(x)):
        h_pos, h_neg = np.zeros(num_bins + 1), np.zeros(num_bins + 1)
        for j in range(len(x)):
            if j == q:
                continue
            for k in range(num_bins + 1):
                pulse = max(0.0, 1.0 - abs(d[q, j] - k * delta) / delta)
                if labels[j] == labels[q]:
                    h_pos[k] += pulse
                else:
                    h_neg[k] += pulse
        positives = np.sum(labels == labels[q]) - 1
        if positives == 0:
            losses.append(0.0)
            continue
        precision = 0.0
        for k in range(num_bins + 1):
            total = h_pos[:k + 1].sum() + h_neg[:k + 1].sum()
            if total > 0:
                precision += h_pos[k] * h_pos[:k + 1].sum() / total
        losses.append(1.0 - precision / positives)
    return float(np.mean(losses))


PENALTIES = {
    "O": lambda r, b, alpha: r,
    "Ds": lambda r, b, alpha: np.log(1 + r),
    "Dq": lambda r, b, alpha: (1 + r) ** -alpha,
    "Iu": lambda r, b, alpha: (1 + r) * np.log(1 + r),
    "Ib": lambda r, b, alpha: (b * r - np.log(1 + b * r)) / b ** 2,
}


def pnp_loop(x, labels, variant="O", b=2.0, alpha=1.0, anneal=0.01):
    """Mean over anchors of the variant's penalty of each positive's count of the
    negatives before it; the anchor is one of its own positives (similarity 1)."""
    s = ref.cosine(x)
    np.fill_diagonal(s, 1.0)
    losses = []
    for a in range(len(x)):
        positives = [i for i in range(len(x)) if labels[i] == labels[a]]  # a included
        total = 0.0
        for i in positives:
            count = sum(1.0 / (1.0 + np.exp(-(s[a, j] - s[a, i]) / anneal))
                        for j in range(len(x)) if labels[j] != labels[a])
            total += PENALTIES[variant](count, b, alpha)
        mean = total / len(positives)
        losses.append(1.0 - mean if variant == "Dq" else mean)
    return float(np.mean(losses))



def dynamic_soft_margin_loop(x, labels, histogram=None, min_val=-2.0, num_bins=10,
                             momentum=0.01):
    """(value, updated histogram): every triplet's x = d_ap - d_an on unit embeddings
    binned into the running histogram (num_bins + 1 nodes, linear interpolation), then
    the mean of CDF(x) x."""
    u = ref.unit(x)
    d = np.sqrt(np.maximum(((u[:, None] - u[None]) ** 2).sum(-1), 0.0))
    values = [d[a, p] - d[a, n] for a in range(len(x)) for p in range(len(x))
              for n in range(len(x))
              if p != a and labels[p] == labels[a] and labels[n] != labels[a]]
    histogram = np.zeros(num_bins + 1) if histogram is None else np.array(histogram)
    if not values:
        return 0.0, histogram
    delta = 2.0 * abs(min_val) / num_bins

    def node(v):
        position = min(max((v - min_val) / delta, 0.0), num_bins)
        return int(np.floor(position)), position - np.floor(position)

    counts = np.zeros(num_bins + 1)
    for v in values:
        i, share = node(v)
        counts[i] += 1.0 - share
        counts[min(i + 1, num_bins)] += share
    m = momentum if histogram.sum() > 0 else 1.0
    histogram = (1.0 - m) * histogram + m * counts
    histogram = histogram / histogram.sum()
    cdf = np.cumsum(histogram)
    return float(np.mean([cdf[node(v)[0]] * v for v in values])), histogram


def manifold_loop(x, labels, proxies, lambda_c=1.0, alpha=0.8, margin=5e-4):
    """The random walk's closed form over [samples; proxies], then each sample's
    intrinsic and context terms, one sample and one proxy at a time."""
    nodes = ref.unit(np.concatenate([x, proxies]))
    n, k = len(x), len(proxies)
    affinity = np.exp(np.maximum(nodes @ nodes.T, 0.0) / 0.5)
    np.fill_diagonal(affinity, 0.0)
    root = np.diag(affinity.sum(axis=1) ** -0.5)
    spread = (1 - alpha) * np.linalg.inv(np.eye(n + k) - alpha * root @ affinity @ root)

    def ranked(score):
        total = 0.0
        for i in range(n):
            gaps = [score(i, p) - score(i, labels[i]) + margin for p in range(k)
                    if p != labels[i]]
            total += np.log(1.0 + sum(np.exp(g) for g in gaps if g >= 0))
        return total / n

    def context(i, p):
        a, b = spread[i], spread[n + p]
        return a @ b / np.linalg.norm(a) / np.linalg.norm(b)

    return ranked(lambda i, p: spread[i, n + p]) + lambda_c * ranked(context)

def keras_numpy(variable):
    """A Keras variable's value as a NumPy array, on any backend."""
    return np.asarray(keras.ops.convert_to_numpy(variable))


#: loss name -> fn(loss, labels, embeddings as float64) -> the batch value
REFERENCES = {
    "DynamicSoftMargin": lambda loss, y, x: dynamic_soft_margin_loop(
        x, y, keras_numpy(loss.histogram), loss.min_val, loss.num_bins,
        loss.histogram_momentum)[0],
    "FastAP": lambda loss, y, x: fast_ap_loop(x, y, loss.num_bins),
    "Manifold": lambda loss, y, x: manifold_loop(
        x, y, keras_numpy(loss.proxies).astype("float64"), loss.lambda_c, loss.alpha,
        loss.margin),
    "PNP": lambda loss, y, x: pnp_loop(x, y, loss.variant, loss.b, loss.alpha, loss.anneal),
    "ThresholdConsistentMargin": lambda loss, y, x: tcm_loop(
        x, y, loss.lambda_plus, loss.lambda_minus, loss.margin_plus, loss.margin_minus),
}
