"""Multiplicative angular margin softmax losses: Large-Margin Softmax and SphereFace.

Both are a cross entropy over the logits s |x_i| |W_c| cos theta_ic (SphereFace: unit
class weights, |W_c| = 1), with the target class's cos theta replaced by
psi(theta) = (-1)^k cos(m theta) - 2k. The logits grow with the embedding's norm, so
the value is not a function of the cosines alone: the engine's matrix is the dot
product M_ic = x_i . W_c (W_c unit for SphereFace) and the target's magnitude
r_i = |x_i| |W_{y_i}| is a differentiable parameter of the terms
(`multiplicative_margin_terms`), carried from `prepare` to `compute_terms` on the
reference set (`MagnitudeReference`).
"""

import collections
import math

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend.primitives import take_along_rows
from keras_dml.losses.base import Reference
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["LargeMarginSoftmax", "SphereFace", "multiple_angle_cosine",
           "multiplicative_margin_terms"]

# A norm is floored here (squared), so that the target's cosine M / r is finite and the
# norm's gradient is zero, not NaN, at a zero embedding.
_MIN_SQUARED_NORM = 1e-24


#: A `keras_dml.losses.Reference` with the per-query magnitudes r (N,) of the target
#: logits (|x_i| |W_{y_i}|, or |x_i| for unit class weights).
MagnitudeReference = collections.namedtuple(
    "MagnitudeReference", Reference._fields + ("magnitudes",),
    defaults=tuple(Reference._field_defaults.values()) + (None,))


def _power(x, exponent):
    return keras.ops.ones_like(x) if exponent == 0 else keras.ops.power(x, exponent)


def multiple_angle_cosine(cosine, margin):
    """cos(m theta) and its derivative d cos(m theta) / d cos theta, from cos theta.

    The multiple-angle formula (Large-Margin Softmax eq. 7; the Chebyshev polynomial
    T_m), term by term as pytorch-metric-learning writes it:

        cos(m theta) = sum_{n=0}^{m // 2} (-1)^n C(m, 2n) cos^{m-2n} theta (1 - cos^2 theta)^n
    """
    sine2 = 1.0 - keras.ops.square(cosine)
    value = slope = 0.0
    for n in range(margin // 2 + 1):
        coefficient = (-1) ** n * math.comb(margin, 2 * n)
        power = margin - 2 * n
        value = value + coefficient * _power(cosine, power) * _power(sine2, n)
        if power:
            slope = slope + coefficient * power * _power(cosine, power - 1) * _power(sine2, n)
        if n:
            slope = slope - coefficient * 2 * n * _power(cosine, power + 1) * _power(sine2, n - 1)
    return value, slope


def multiplicative_margin_terms(matrix, labels, magnitudes, scale, margin):
    """Value per sample, d value / d matrix and d value / d magnitudes.

    With M the (N, C) dot products x_i . W_c, r_i the target's magnitude,
    cos theta = M_{i y_i} / r_i and k = floor(theta m / pi) (a constant of the
    gradient, as in pytorch-metric-learning):

        psi = (-1)^k cos(m theta) - 2k                       (L-Softmax eq. 6)
        L_i = -log softmax_c(s z_i)_{y_i},  z_ic = M_ic (c != y_i),  z_iy = r_i psi

        dL_i / dM_ic = s (p_ic - [c = y_i]) psi'^[c = y_i]
        dL_i / dr_i = s (p_iy - 1) (psi - cos theta psi')

    with p the softmax of s z and psi' = d psi / d cos theta.

    Returns:
        (value (N,), W (N, C), (d value / d magnitudes (N,),)).
    """
    own = ops.own_entries(labels)
    dot = take_along_rows(matrix, labels)
    cosine = dot / keras.ops.maximum(magnitudes, math.sqrt(_MIN_SQUARED_NORM))
    angle = keras.ops.arccos(keras.ops.clip(cosine, -1.0, 1.0))
    k = keras.ops.stop_gradient(keras.ops.floor(angle / (math.pi / margin)))
    sign = 1.0 - 2.0 * keras.ops.mod(k, 2.0)
    multiple, multiple_slope = multiple_angle_cosine(cosine, margin)
    psi, slope = sign * multiple - 2.0 * k, sign * multiple_slope
    value, probabilities, _ = ops.scaled_softmax(
        keras.ops.scatter_update(matrix, own, magnitudes * psi), labels, scale)
    own_grad = take_along_rows(probabilities, labels) - scale  # s (p_iy - 1)
    weights = keras.ops.scatter_update(probabilities, own, own_grad * slope)
    return value, weights, (own_grad * (psi - cosine * slope),)


def _norms(x):
    return keras.ops.sqrt(keras.ops.maximum(keras.ops.sum(keras.ops.square(x), axis=1),
                                            _MIN_SQUARED_NORM))


class MultiplicativeMargin(ProxyLoss):
    """Shared machinery of LargeMarginSoftmax and SphereFace (not for direct use).

    Subclasses set `unit_weights`: the class weights are L2-normalised (SphereFace)
    or keep their norm (Large-Margin Softmax).
    """

    config_keys = ProxyLoss.config_keys + ("margin", "scale")
    reads_pair_masks = True  # `pairs` carries the magnitudes to the terms
    unit_weights = False

    def __init__(self, num_classes, margin=4, scale=1.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, *, reduction="sum_over_batch_size", name=None,
                 dtype=None):
        self.margin = _hyper.integer_at_least("margin", margin, 1)
        self.scale = float(_hyper.positive("scale", scale))
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer
                         or keras.initializers.RandomNormal(stddev=1.0),
                         metric="dot", reduction=reduction, name=name, dtype=dtype)

    def _keys(self, keys):
        return ops.l2_normalize(keys) if self.unit_weights else keys

    def pair_matrix(self, embeddings, reference):
        """Dot products x_i . W_c (N, C), W_c unit for SphereFace."""
        return super().pair_matrix(
            embeddings, reference._replace(embeddings=self._keys(reference.embeddings)))

    def prepare(self, labels, embeddings, reference=None):
        """The checked batch, and the reference set with each query's magnitude r_i."""
        labels, embeddings, reference = super().prepare(labels, embeddings, reference)
        magnitudes = _norms(embeddings)
        if not self.unit_weights:
            keys = reference.embeddings
            keys = keys if reference.trainable else keras.ops.stop_gradient(keys)
            magnitudes = magnitudes * keras.ops.take(_norms(keys), labels, axis=0)
        return labels, embeddings, MagnitudeReference(*reference, magnitudes=magnitudes)

    def pairs(self, labels, reference, matrix):
        return super().pairs(labels, reference, matrix)._replace(context=reference.magnitudes)

    def parameters(self, pairs):
        """The magnitudes r (N,): the gradient reaches the norms of x_i (and W_{y_i})."""
        return (pairs.context,)

    def compute_terms(self, matrix, pairs, magnitudes):
        return multiplicative_margin_terms(matrix, pairs.labels, magnitudes, self.scale,
                                           self.margin)

    def logits(self, embeddings):
        """Classification logits without the margin (N, C), pytorch-metric-learning's
        `get_logits`: s x . W_c (W_c unit for SphereFace). Builds the proxies on first use."""
        embeddings = ops.to_float32(embeddings)
        return self.scale * self.pair_matrix(embeddings,
                                             self.default_reference(None, embeddings))


@register(example={"num_classes": 8}, reference="proxies")
class LargeMarginSoftmax(MultiplicativeMargin):
    """Large-Margin Softmax (L-Softmax; Liu et al. ICML 2016, eq. 5-7).

    With theta_ic the angle between sample x_i and class weight W_c (the proxies),
    margin m (an integer) and scale s:

        L = -1/N sum_i log( e^{s |W_y| |x_i| psi(theta_{i y})}
              / (e^{s |W_y| |x_i| psi(theta_{i y})} + sum_{c != y} e^{s |W_c| |x_i| cos theta_ic}) )

        psi(theta) = (-1)^k cos(m theta) - 2k,  theta in [k pi / m, (k + 1) pi / m]   (eq. 6)

    with y = y_i and cos(m theta) from cos theta by the multiple-angle formula (eq. 7,
    `multiple_angle_cosine`). Neither the samples nor the class weights are
    normalised: the logits grow with both norms. As in pytorch-metric-learning's
    `LargeMarginSoftmaxLoss`, k is a constant of the gradient; the gradient is
    otherwise exact, through the cosines and the norms. keras_dml does not have the
    paper's annealing (a softmax blended in early in training) nor PML's optional
    weight regulariser.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        margin: the integer m >= 1 (m = 1 is the softmax). Defaults to 4 (PML's).
        scale: s. Defaults to 1 (PML's).
        proxy_lr_multiplier: class weights' learning rate relative to the optimizer's.
            Defaults to 1.0.
        proxy_initializer: defaults to a standard normal (PML's default for W).
        reduction, name, dtype: as for `keras.losses.Loss`.

    `loss.proxies` (C, d) are the class weights, `loss.logits(x)` the logits without
    the margin.

    Examples:

    >>> loss = keras_dml.losses.LargeMarginSoftmax(num_classes=100, margin=4)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Liu, Wen, Yu, Yang, "Large-Margin Softmax Loss for Convolutional Neural
        Networks", ICML 2016.
    """

    def __init__(self, num_classes, margin=4, scale=1.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, *, reduction="sum_over_batch_size",
                 name="large_margin_softmax", dtype=None):
        super().__init__(num_classes, margin, scale, proxy_lr_multiplier, proxy_initializer,
                         reduction=reduction, name=name, dtype=dtype)


@register(example={"num_classes": 8}, reference="proxies")
class SphereFace(MultiplicativeMargin):
    """SphereFace: angular softmax, A-Softmax (Liu et al. CVPR 2017, eq. 7).

    Large-Margin Softmax (`LargeMarginSoftmax`) with unit class weights |W_c| = 1:

        L = -1/N sum_i log( e^{s |x_i| psi(theta_{i y})}
              / (e^{s |x_i| psi(theta_{i y})} + sum_{c != y} e^{s |x_i| cos theta_ic}) )

    with psi(theta) = (-1)^k cos(m theta) - 2k on [k pi / m, (k + 1) pi / m] and y = y_i.
    The samples keep their norm. As pytorch-metric-learning's `SphereFaceLoss`: k is
    a constant of the gradient, no annealing (the paper blends in the softmax early
    in training).

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        margin: the integer m >= 1. Defaults to 4 (PML's and the paper's).
        scale: s. Defaults to 1 (PML's).
        proxy_lr_multiplier: class weights' learning rate relative to the optimizer's.
            Defaults to 1.0.
        proxy_initializer: defaults to a standard normal (PML's default for W; only
            the directions matter).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Examples:

    >>> loss = keras_dml.losses.SphereFace(num_classes=100, margin=4)
    >>> predicted = keras.ops.argmax(loss.logits(model(x)), axis=1)  # doctest: +SKIP

    Reference:
        Liu, Wen, Yu, Li, Raj, Song, "SphereFace: Deep Hypersphere Embedding for Face
        Recognition", CVPR 2017.
    """

    unit_weights = True

    def __init__(self, num_classes, margin=4, scale=1.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, *, reduction="sum_over_batch_size",
                 name="sphereface", dtype=None):
        super().__init__(num_classes, margin, scale, proxy_lr_multiplier, proxy_initializer,
                         reduction=reduction, name=name, dtype=dtype)
