"""Slow NumPy loops (float64) of Large-Margin Softmax, SphereFace, P2SGrad, the instance
loss and VICReg, written from the papers' equations (and PML's reductions).

Each returns the batch loss as Keras reduces it (the mean over samples, or VICReg's
one value per batch).
"""

import math

import numpy as np


def _logsumexp(values):
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def multiplicative_margin_softmax(x, labels, weights, margin, scale, unit_weights=False):
    """L-Softmax eq. 5-6 (SphereFace eq. 7 with `unit_weights`): the target logit
    s |x| |W_y| psi(theta), psi = (-1)^k cos(m theta) - 2k on [k pi/m, (k+1) pi/m]."""
    total = 0.0
    for i, y in enumerate(labels):
        norm = np.linalg.norm(x[i])
        logits = []
        for c, w in enumerate(weights):
            magnitude = norm * (1.0 if unit_weights else np.linalg.norm(w))
            cosine = x[i] @ w / (norm * np.linalg.norm(w))
            if c == y:
                theta = math.acos(min(max(cosine, -1.0), 1.0))
                k = math.floor(theta * margin / math.pi)
                cosine = (-1) ** k * math.cos(margin * theta) - 2 * k
            logits.append(scale * magnitude * cosine)
        total += _logsumexp(logits) - logits[y]
    return total / len(labels)


def p2sgrad(x, labels, weights):
    """1/(N C) sum_i sum_c (cos theta_ic - [c = y_i])^2 (P2SGrad eq. 11's loss)."""
    total = 0.0
    for i, y in enumerate(labels):
        for c, w in enumerate(weights):
            cosine = x[i] @ w / (np.linalg.norm(x[i]) * np.linalg.norm(w))
            total += (cosine - (1.0 if c == y else 0.0)) ** 2
    return total / (len(labels) * len(weights))


def instance(x, labels, gamma):
    """-1/N sum_i log softmax_j(gamma cos(x_i, x_j))_{t_i}, t_i the rank of label y_i among
    the batch's distinct labels (PML's InstanceLoss)."""
    distinct = sorted(set(int(label) for label in labels))
    total = 0.0
    for i, y in enumerate(labels):
        logits = [gamma * (x[i] @ x[j]) / (np.linalg.norm(x[i]) * np.linalg.norm(x[j]))
                  for j in range(len(x))]
        total += _logsumexp(logits) - logits[distinct.index(int(y))]
    return total / len(labels)


def _variance_and_covariance(z, epsilon):
    n, d = z.shape
    mean = [sum(z[i, j] for i in range(n)) / n for j in range(d)]
    divisor = max(n - 1, 1)
    covariance = [[sum((z[i, j] - mean[j]) * (z[i, k] - mean[k]) for i in range(n)) / divisor
                   for k in range(d)] for j in range(d)]
    variance = sum(max(0.0, 1.0 - math.sqrt(covariance[j][j] + epsilon)) for j in range(d)) / d
    off = sum(covariance[j][k] ** 2 for j in range(d) for k in range(d) if j != k) / d
    return variance, off


def vicreg(pairs, invariance_lambda=25.0, variance_mu=25.0, covariance_v=1.0, epsilon=1e-4):
    """VICReg eq. 6 as the authors' code: lambda MSE(Z, Z') + mu [v(Z) + v(Z')] / 2
    + nu [c(Z) + c(Z')], rows of `pairs` being (z_i, z'_i) concatenated."""
    d = pairs.shape[1] // 2
    z, z_prime = pairs[:, :d], pairs[:, d:]
    invariance = sum((z[i, j] - z_prime[i, j]) ** 2 for i in range(len(z)) for j in range(d))
    invariance /= len(z) * d
    variance, covariance = _variance_and_covariance(z, epsilon)
    variance_prime, covariance_prime = _variance_and_covariance(z_prime, epsilon)
    return (invariance_lambda * invariance + variance_mu * (variance + variance_prime) / 2
            + covariance_v * (covariance + covariance_prime))
