"""P2SGrad: a mean squared error between the cosines to the class weights and one-hot targets."""

import keras

from keras_dml.backend import primitives
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["P2SGrad", "p2sgrad_terms"]


def p2sgrad_terms(matrix, labels):
    """Value per sample and d value / d matrix of P2SGrad on an (N, C) cosine matrix.

        L_i = 1/C sum_c (clip(cos theta_ic, -1, 1) - [c = y_i])^2
        dL_i / d cos theta_ic = 2/C (cos theta_ic - [c = y_i]) inside [-1, 1], 0 outside

    (the clip only acts on float rounding past +-1, as pytorch-metric-learning's clamp).
    """
    cosine = keras.ops.clip(matrix, -1.0, 1.0)
    inside = keras.ops.logical_and(matrix >= -1.0, matrix <= 1.0)
    error = primitives.subtract_at(cosine, labels, 1.0)
    classes = keras.ops.cast(keras.ops.shape(matrix)[1], "float32")
    weights = keras.ops.where(inside, 2.0 / classes * error, 0.0)
    return keras.ops.mean(keras.ops.square(error), axis=1), weights


@register(example={"num_classes": 8}, reference="proxies")
class P2SGrad(ProxyLoss):
    """P2SGrad (Zhang et al. CVPR 2019, eq. 11 as a loss).

    The paper replaces the gradient of margin softmax losses with the
    probability-to-similarity gradient of eq. 11,
    dL / d cos theta_ic = cos theta_ic - [c = y_i], which is the gradient of a mean
    squared error between the cosines and the one-hot label (the form of the
    authors' code and of pytorch-metric-learning's `P2SGradLoss`):

        L = 1/(N C) sum_i sum_c (cos theta_ic - [c = y_i])^2

    with theta_ic the angle between sample x_i and class weight W_c (the proxies).
    It has no hyperparameter. The value and the embeddings' gradient equal PML's;
    the class weights' gradient is that of the cosine, tangent to the sphere, where
    PML rescales W to unit columns in place before each call and takes the gradient
    of the dot product (its radial part is undone by the next rescaling).

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        proxy_lr_multiplier: class weights' learning rate relative to the optimizer's.
            Defaults to 1.0.
        proxy_initializer: defaults to uniform in [-1, 1] (PML's, before its
            rescaling to unit columns, which the cosine makes irrelevant).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Examples:

    >>> loss = keras_dml.losses.P2SGrad(num_classes=100)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Zhang, Zhao, Zhang, Wang, Li, "P2SGrad: Refined Gradients for Optimizing Deep
        Face Models", CVPR 2019.
    """

    def __init__(self, num_classes, proxy_lr_multiplier=1.0, proxy_initializer=None, *,
                 reduction="sum_over_batch_size", name="p2sgrad", dtype=None):
        super().__init__(num_classes, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer
                         or keras.initializers.RandomUniform(-1.0, 1.0),
                         reduction=reduction, name=name, dtype=dtype)

    def compute_terms(self, matrix, pairs):
        return p2sgrad_terms(matrix, pairs.labels)
