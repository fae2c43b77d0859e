"""Manifold loss (Aziere and Todorovic, CVPR 2019): similarities spread by a random walk
over the batch and learnable proxies, ranked against each sample's own proxy."""

import keras
import numpy as np

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend.primitives import as_tensor
from keras_dml.losses.base import Reference
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["Manifold"]


def _margin_softplus(scores, own, margin):
    """mean_i log(1 + sum_{k != c_i, t_ik >= 0} exp(t_ik)), t_ik = scores_ik -
    scores_ic_i + margin, and its derivative w.r.t. `scores` (N, K)."""
    gap = scores - keras.ops.sum(scores * own, axis=1, keepdims=True) + margin
    active = keras.ops.logical_and(gap >= 0.0, own == 0.0)
    exps = keras.ops.where(active, keras.ops.exp(gap), 0.0)
    total = keras.ops.sum(exps, axis=1)
    rows = keras.ops.cast(keras.ops.shape(scores)[0], "float32")
    shares = exps / (1.0 + total[:, None]) / rows
    derivative = shares - own * keras.ops.sum(shares, axis=1, keepdims=True)
    return keras.ops.sum(keras.ops.log1p(total)) / rows, derivative


def _cosine_rows(a, b):
    """Cosine similarities of the rows of a and b, and the map of its derivative back to
    (d a, d b)."""
    a_norm = keras.ops.sqrt(keras.ops.sum(keras.ops.square(a), axis=1, keepdims=True))
    b_norm = keras.ops.sqrt(keras.ops.sum(keras.ops.square(b), axis=1, keepdims=True))
    a_unit, b_unit = a / a_norm, b / b_norm
    cosine = keras.ops.matmul(a_unit, keras.ops.transpose(b_unit))

    def back(upstream):
        to_a = keras.ops.matmul(upstream, b_unit)
        to_b = keras.ops.matmul(keras.ops.transpose(upstream), a_unit)
        return ((to_a - keras.ops.sum(to_a * a_unit, axis=1, keepdims=True) * a_unit) / a_norm,
                (to_b - keras.ops.sum(to_b * b_unit, axis=1, keepdims=True) * b_unit) / b_norm)

    return cosine, back


def manifold_terms(matrix, proxy_similarity, labels, alpha, margin, lambda_c):
    """(value, d value / d matrix, (d value / d proxy_similarity,)).

    `matrix` (N, N + K): cosine similarities of the samples to [samples; proxies];
    `proxy_similarity` (K, K). With S the (N + K)^2 similarity of all nodes, A = exp(2
    [S]_+) off the diagonal, S_bar = D^-1/2 A D^-1/2 and F = (1 - alpha)(I - alpha
    S_bar)^-1 (the random walk's closed form), the backward pass runs the chain in
    reverse: dF -> d S_bar = alpha (1 - alpha) L dF L (L = (I - alpha S_bar)^-1,
    symmetric) -> dA (with the degrees' part) -> dS, split between the matrix's
    entries and the proxies' block.
    """
    k = proxy_similarity.shape[0]
    similarity = keras.ops.concatenate(
        [matrix, keras.ops.concatenate([keras.ops.transpose(matrix[:, -k:]),
                                        proxy_similarity], axis=1)], axis=0)
    nodes = keras.ops.shape(similarity)[0]
    off_diagonal = 1.0 - keras.ops.eye(nodes)
    affinity = keras.ops.exp(2.0 * keras.ops.relu(similarity)) * off_diagonal
    inverse_root = keras.ops.power(keras.ops.sum(affinity, axis=1), -0.5)
    normalised = inverse_root[:, None] * affinity * inverse_root[None, :]
    walk = keras.ops.inv(keras.ops.eye(nodes) - alpha * normalised)
    spread = (1.0 - alpha) * walk
    own = keras.ops.one_hot(labels, k)
    # intrinsic: each sample's spread similarity to the proxies
    intrinsic, d_intrinsic = _margin_softplus(spread[:-k, -k:], own, margin)
    # context: cosine between each sample's and each proxy's spread rows
    context_scores, back = _cosine_rows(spread[:-k], spread[-k:])
    context, d_context = _margin_softplus(context_scores, own, margin)
    d_samples, d_proxies = back(lambda_c * d_context)
    d_samples = d_samples + keras.ops.concatenate(
        [keras.ops.zeros_like(d_samples[:, :-k]), d_intrinsic], axis=1)
    d_spread = keras.ops.concatenate([d_samples, d_proxies], axis=0)
    # back through the inverse, the normalisation and the exponential
    d_normalised = alpha * (1.0 - alpha) * keras.ops.matmul(keras.ops.matmul(walk, d_spread),
                                                            walk)
    scaled = d_normalised * normalised  # G_ij d_i A_ij d_j
    degrees = keras.ops.sum(scaled, axis=1) + keras.ops.sum(scaled, axis=0)
    d_affinity = (d_normalised * inverse_root[:, None] * inverse_root[None, :]
                  - 0.5 * (degrees * keras.ops.square(inverse_root))[:, None])
    d_similarity = keras.ops.where(similarity > 0.0, 2.0 * d_affinity * affinity, 0.0)
    weights = d_similarity[:-k]
    weights = weights + keras.ops.concatenate(
        [keras.ops.zeros_like(weights[:, :-k]), keras.ops.transpose(d_similarity[-k:, :-k])],
        axis=1)
    return intrinsic + lambda_c * context, weights, (d_similarity[-k:, -k:],)


@register(example={"num_classes": 8}, reference="batch", row_local=False)
class Manifold(ProxyLoss):
    """Manifold loss (Aziere and Todorovic, CVPR 2019), with a sample's class as its
    proxy (meta-class).

    The N samples and the K learnable proxies are the nodes of a graph with
    affinities A_ij = exp([cos_ij]_+ / 0.5) (0 on the diagonal). A random walk that
    passes a share alpha of each node's similarity on to its neighbours converges to
    F = (1 - alpha) (I - alpha D^-1/2 A D^-1/2)^-1 (D the degrees). With c_i sample
    i's proxy, the intrinsic loss ranks F's sample-to-proxy entries and the context
    loss the cosine of the rows F_i, F_p:

        L_int = 1/N sum_i log(1 + sum_{k != c_i} [F_ik - F_ic_i + m >= 0] exp(F_ik - F_ic_i + m))
        L_ctx = the same on cos(F_i, F_k)
        L = L_int + lambda_C L_ctx

    one value per batch. W (samples x [samples; proxies]) and the proxies' block are
    the exact derivative, through the matrix inverse. A step costs O((N + K)^3): one
    (N + K)^2 inverse and a few products of that size, forward and backward (with
    Omniglot's 964 classes and batches of 128, 1,092 nodes).

    pytorch-metric-learning 2.9's `ManifoldLoss(l, K, lambdaC, alpha, margin)`
    computes the same value and gradients when given the classes as its
    meta-classes (`indices_tuple=labels`); without them it draws random
    meta-classes every call (it takes no labels). Here the labels are the proxies'
    indices, in [0, num_classes). PML's `lambdaC=inf` (context only) is not offered.

    Args:
        num_classes: K, the number of proxies (meta-classes); labels lie in [0, K).
            (PML's default K is 50.)
        lambda_c: the weight lambda_C of the context loss. Defaults to 1.0.
        alpha: the random walk's share alpha, in (0, 1). Defaults to 0.8.
        margin: m. Defaults to 5e-4.
        proxy_lr_multiplier, proxy_initializer: as for `ProxyLoss` (PML draws its
            proxies from a standard normal: the same directions).

    Examples:

    >>> loss = keras_dml.losses.Manifold(num_classes=50, lambda_c=1.0)

    Reference:
        Aziere, Todorovic, "Ensemble Deep Manifold Similarity Learning using Hard
        Proxies", CVPR 2019.
    """

    config_keys = ProxyLoss.config_keys + ("lambda_c", "alpha", "margin")

    def __init__(self, num_classes, lambda_c=1.0, alpha=0.8, margin=5e-4,
                 proxy_lr_multiplier=1.0, proxy_initializer=None,
                 reduction="sum_over_batch_size", name="manifold", dtype=None):
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)
        self.lambda_c = _hyper.non_negative("lambda_c", lambda_c)
        self.alpha = _hyper.below_one("alpha", _hyper.positive("alpha", alpha))
        self.margin = _hyper.finite("margin", margin)

    def default_reference(self, labels, embeddings):
        """The keys: the batch (its own copies excluded), then the proxies."""
        proxies = self.trainable_layer(embeddings)
        key_labels = keras.ops.concatenate(
            [keras.ops.cast(labels, "int32"), np.arange(self.num_classes, dtype=np.int32)])
        keys = keras.ops.concatenate([embeddings, keras.ops.cast(proxies, embeddings.dtype)])
        own = keras.ops.arange(keras.ops.shape(embeddings)[0], dtype="int32")
        return Reference(key_labels, keys, trainable=True, own=own)

    def check_reference(self, reference, embeddings):
        raise ValueError("Manifold takes no explicit reference set: its graph is the batch "
                         "and its proxies.")

    def parameters(self, pairs):
        return (ops.pairwise(as_tensor(self.proxies)),)

    def compute_terms(self, matrix, pairs, proxy_similarity):
        return manifold_terms(matrix, proxy_similarity, pairs.labels, self.alpha, self.margin,
                              self.lambda_c)
