"""Additive-margin softmax losses: ArcFace, CosFace and Sub-center ArcFace.

Each is a cross entropy over scaled cosines to learned class weights, with a margin
on the target class. The class weights are the loss's proxies (`loss.proxies`,
(C K, d), class-major: row c K + k is sub-centre k of class c), kept in a
`keras_dml.layers.Proxies` layer that `DMLModel` trains and saves.

The math is in `margin_softmax_terms`, a pure function of the (N, C K) cosine
matrix and the labels returning (value per sample, W = d value / d matrix), so
the backward pass of the whole loss is one multiply by W.
"""

import math

import keras
import numpy as np

from keras_dml import hyperparameters as _hyper
from keras_dml import ops
from keras_dml.backend.primitives import take_along_rows
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.registry import register

__all__ = ["ArcFace", "CosFace", "SubCenterArcFace"]

# sin(theta) is floored here, so that d cos(theta + m) / d cos(theta) stays finite
# at theta = 0 (a sample exactly on its class weight).
_MIN_SINE = 1e-6


def arcface_target(cosine, margin):
    """ArcFace's target logit phi(cos theta) and its derivative d phi / d cos theta.

    phi = cos(theta + m) = cos theta cos m - sin theta sin m while theta <= pi - m,
    and cos theta - m sin m beyond (keeps phi decreasing in theta; the fallback of
    the insightface code and pytorch-metric-learning).
    """
    sine = keras.ops.sqrt(keras.ops.maximum(1.0 - keras.ops.square(cosine), _MIN_SINE ** 2))
    inside = cosine >= math.cos(math.pi - margin)
    phi = keras.ops.where(inside, cosine * math.cos(margin) - sine * math.sin(margin),
                          cosine - margin * math.sin(margin))
    slope = keras.ops.where(inside, math.cos(margin) + cosine / sine * math.sin(margin),
                            keras.ops.ones_like(cosine))
    return phi, slope


def cosface_target(cosine, margin):
    """CosFace's target logit cos theta - m and its derivative (1)."""
    return cosine - margin, keras.ops.ones_like(cosine)


def sub_center_cosines(matrix, sub_centers):
    """Per-class max over the sub-centres of an (N, K C) centre-major cosine matrix.

    Returns (cosines (N, C), float32 (N, K, C): 1 at each class's closest
    sub-centre, the first of ties). The max runs over the middle axis of the
    (N, K, C) view (`proxies.centre_major`): no copy of the matrix.
    """
    by_center = keras.ops.reshape(matrix, (keras.ops.shape(matrix)[0], sub_centers, -1))
    closest = keras.ops.max(by_center, axis=1)
    taken, hits = keras.ops.zeros_like(closest, dtype="bool"), []
    for cosines in keras.ops.unstack(by_center, num=sub_centers, axis=1):
        hit = keras.ops.logical_and(keras.ops.equal(cosines, closest),
                                    keras.ops.logical_not(taken))
        hits.append(hit)
        taken = keras.ops.logical_or(taken, hit)
    return closest, keras.ops.cast(keras.ops.stack(hits, axis=1), "float32")


def margin_softmax_terms(matrix, labels, scale, target_fn):
    """Value per sample and d value / d matrix of an additive-margin softmax loss.

        L_i = -log( e^{s phi(cos theta_{i y_i})}
                    / (e^{s phi(cos theta_{i y_i})} + sum_{c != y_i} e^{s cos theta_ic}) )

        dL_i / d cos theta_ic = s (p_ic - [c = y_i]) phi'(cos theta_ic)^[c = y_i]

    with p the softmax of the margin logits.

    Args:
        matrix: float32 (N, C) cosines of samples to class weights.
        labels: int32 (N,) in [0, C).
        scale: s.
        target_fn: `cosine -> (phi, phi')` (`arcface_target`, `cosface_target`).
    """
    own = ops.own_entries(labels)
    phi, slope = target_fn(take_along_rows(matrix, labels))
    value, probabilities, _ = ops.scaled_softmax(
        keras.ops.scatter_update(matrix, own, phi), labels, scale)
    own_grad = (take_along_rows(probabilities, labels) - scale) * slope  # s (p_iy - 1) phi'
    return value, keras.ops.scatter_update(probabilities, own, own_grad)


def _default_initializer():
    """Standard normal class weights, as pytorch-metric-learning's W (only their
    directions matter)."""
    return keras.initializers.RandomNormal(stddev=1.0)


def _degrees(margin):
    margin = _hyper.non_negative("margin", margin)
    if margin >= 180.0:
        raise ValueError(f"margin is an angle in degrees below 180, got {margin!r}.")
    return margin


class MarginSoftmax(ProxyLoss):
    """Shared machinery of ArcFace, CosFace and Sub-center ArcFace (not for direct use).

    Subclasses set `target(cosine) -> (phi, phi')` and their defaults.
    """

    def __init__(self, num_classes, margin, scale, sub_centers=1, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size", name=None,
                 dtype=None):
        self.margin = float(_hyper.non_negative("margin", margin))
        self.scale = float(_hyper.positive("scale", scale))
        super().__init__(num_classes,
                         proxies_per_class=_hyper.integer_at_least("sub_centers", sub_centers, 1),
                         proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer or _default_initializer(),
                         reduction=reduction, name=name, dtype=dtype)

    xla_terms = True  # about a dozen elementwise passes over the (N, C K) matrix

    def target(self, cosine):
        raise NotImplementedError

    def compute_terms(self, matrix, pairs):
        labels = pairs.labels
        k = self.proxies_per_class
        if k == 1:
            return margin_softmax_terms(matrix, labels, self.scale, self.target)
        cosines, closest = sub_center_cosines(matrix, k)
        value, weights = margin_softmax_terms(cosines, labels, self.scale, self.target)
        # each class's weight goes to its closest sub-centre's column (centre-major)
        return value, keras.ops.reshape(weights[:, None, :] * closest,
                                        keras.ops.shape(matrix))

    def class_cosines(self, embeddings):
        """Cosines (N, C) of embeddings to each class (its closest sub-centre)."""
        embeddings = ops.to_float32(embeddings)
        reference = self.default_reference(None, embeddings)
        matrix = ops.cosine_between(embeddings, reference.embeddings)
        if self.proxies_per_class == 1:
            return matrix
        return sub_center_cosines(matrix, self.proxies_per_class)[0]

    def logits(self, embeddings):
        """Classification logits s cos theta (N, C), without the margin (for inference).

        `keras.ops.argmax(loss.logits(x), axis=1)` is the predicted class; the softmax of
        the logits its probabilities. Builds the proxies on first use.
        """
        return self.scale * self.class_cosines(embeddings)

    def get_config(self):
        config = super().get_config()
        config.update(margin=self.margin, scale=self.scale)
        return config


@register(example={"num_classes": 8}, reference="proxies")
class ArcFace(MarginSoftmax):
    """ArcFace: additive angular margin loss (Deng et al. CVPR 2019, eq. 3).

    With theta_ic the angle between the L2-normalised sample f_i and class weight
    W_c (the proxies), scale s and margin m (radians inside, degrees in the
    argument, as pytorch-metric-learning):

        L = -1/N sum_i log( e^{s cos(theta_{i y_i} + m)}
                / (e^{s cos(theta_{i y_i} + m)} + sum_{c != y_i} e^{s cos theta_ic}) )

    Beyond theta > pi - m, cos(theta + m) is replaced by cos theta - m sin m, so the
    target logit keeps decreasing with the angle (the insightface code's fallback;
    pytorch-metric-learning's `ArcFaceLoss` does the same). The gradient is exact
    (`margin_softmax_terms`) and finite also at theta = 0.

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        margin: additive angular margin m in degrees. Defaults to 28.6 (0.5 rad,
            the paper's).
        scale: s. Defaults to 64 (the paper's).
        proxy_lr_multiplier: class weights' learning rate relative to the optimizer's.
        proxy_initializer: defaults to a standard normal (PML's default for W).

    `loss.proxies` (C, d) are the class weights, `loss.logits(x)` = s cos theta
    the classifier logits.

    Examples:

    >>> loss = keras_dml.losses.ArcFace(num_classes=100)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Deng, Guo, Xue, Zafeiriou, "ArcFace: Additive Angular Margin Loss for Deep
        Face Recognition", CVPR 2019.
    """

    def __init__(self, num_classes, margin=28.6, scale=64.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size", name="arcface",
                 dtype=None):
        super().__init__(num_classes, _degrees(margin), scale,
                         proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)

    def target(self, cosine):
        return arcface_target(cosine, math.radians(self.margin))


@register(example={"num_classes": 8}, reference="proxies")
class CosFace(MarginSoftmax):
    """CosFace: large margin cosine loss (Wang et al. CVPR 2018, eq. 4).

        L = -1/N sum_i log( e^{s (cos theta_{i y_i} - m)}
                / (e^{s (cos theta_{i y_i} - m)} + sum_{c != y_i} e^{s cos theta_ic}) )

    on L2-normalised samples and class weights (the proxies).

    Args:
        num_classes: number of training classes C; labels must lie in [0, C).
        margin: cosine margin m. Defaults to 0.35 (the paper's).
        scale: s. Defaults to 64 (the paper's).
        proxy_lr_multiplier, proxy_initializer: as for `ArcFace`.

    Examples:

    >>> loss = keras_dml.losses.CosFace(num_classes=100, margin=0.35, scale=64)

    Reference:
        Wang et al., "CosFace: Large Margin Cosine Loss for Deep Face Recognition",
        CVPR 2018.
    """

    def __init__(self, num_classes, margin=0.35, scale=64.0, proxy_lr_multiplier=1.0,
                 proxy_initializer=None, reduction="sum_over_batch_size", name="cosface",
                 dtype=None):
        super().__init__(num_classes, margin, scale, proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)

    def target(self, cosine):
        return cosface_target(cosine, self.margin)


@register(example={"num_classes": 8, "sub_centers": 2}, reference="proxies")
class SubCenterArcFace(MarginSoftmax):
    """Sub-center ArcFace (Deng et al. ECCV 2020, eq. 1 with the sub-class max).

    Each class has K sub-centres; a sample's cosine to class c is the max over
    c's sub-centres, cos theta_ic = max_k cos(f_i, W_ck), and ArcFace (eq. 3 of
    the ArcFace paper, with its fallback) is applied to these class cosines. Only
    the closest sub-centre of each class receives a gradient. `loss.proxies` are
    (C K, d), class-major (row c K + k), like pytorch-metric-learning's W columns.

    `outliers(embeddings, labels, threshold=75)` is the paper's cleaning step:
    samples farther than `threshold` degrees from their class's dominant sub-centre.

    Args:
        num_classes: number of training classes C.
        sub_centers: K. Defaults to 3 (the paper's).
        margin: degrees. Defaults to 28.6. scale: defaults to 64.

    Examples:

    >>> loss = keras_dml.losses.SubCenterArcFace(num_classes=100, sub_centers=3)
    >>> outliers, dominant = loss.outliers(embeddings, labels, threshold=75)

    Reference:
        Deng, Guo, Liu, Yu, Zafeiriou, "Sub-center ArcFace: Boosting Face
        Recognition by Large-scale Noisy Web Faces", ECCV 2020.
    """

    def __init__(self, num_classes, sub_centers=3, margin=28.6, scale=64.0,
                 proxy_lr_multiplier=1.0, proxy_initializer=None,
                 reduction="sum_over_batch_size", name="sub_center_arcface", dtype=None):
        super().__init__(num_classes, _degrees(margin), scale, sub_centers=sub_centers,
                         proxy_lr_multiplier=proxy_lr_multiplier,
                         proxy_initializer=proxy_initializer, reduction=reduction,
                         name=name, dtype=dtype)

    target = ArcFace.target

    @property
    def sub_centers(self):
        return self.proxies_per_class

    def outliers(self, embeddings, labels, threshold=75.0):
        """Samples far from their class's dominant sub-centre (paper section 3.2).

        For each class in `labels`, the dominant sub-centre is the one closest to
        most of the class's samples; a sample whose angle to it exceeds
        `threshold` degrees is an outlier (label noise to drop before retraining).

        Returns:
            (indices of the outlier samples (int64 NumPy array, sorted), dominant
            sub-centres (C, d) NumPy array; rows of classes absent from `labels` are
            zero).
        """
        threshold = _hyper.positive("threshold", threshold)
        embeddings = keras.ops.convert_to_numpy(ops.to_float32(embeddings))
        labels = np.asarray(labels).reshape(-1).astype(np.int64)
        if labels.shape[0] != embeddings.shape[0]:
            raise ValueError(f"outliers: {labels.shape[0]} labels for "
                             f"{embeddings.shape[0]} embeddings.")
        if labels.size and (labels.min() < 0 or labels.max() >= self.num_classes):
            raise ValueError(f"outliers: labels must lie in [0, {self.num_classes}), got "
                             f"values in [{labels.min()}, {labels.max()}].")
        cosines = keras.ops.convert_to_numpy(
            ops.cosine_between(embeddings, self.trainable_layer(embeddings)))
        proxies = keras.ops.convert_to_numpy(self.proxies)
        k = self.sub_centers
        dominant = np.zeros((self.num_classes, proxies.shape[1]), np.float32)
        limit = math.cos(math.radians(threshold))
        found = []
        for label in np.unique(labels):
            members = np.flatnonzero(labels == label)
            own = cosines[members, label * k:(label + 1) * k]
            center = np.bincount(own.argmax(axis=1), minlength=k).argmax()
            dominant[label] = proxies[label * k + center]
            found.append(members[own[:, center] < limit])
        found = np.sort(np.concatenate(found)) if found else np.zeros(0, np.int64)
        return found.astype(np.int64), dominant

    def get_config(self):
        config = super().get_config()
        config["sub_centers"] = self.sub_centers
        return config
