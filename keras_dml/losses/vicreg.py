"""VICReg: variance-invariance-covariance regularisation of two views, without labels."""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml.losses.base import PairLoss, Pairs
from keras_dml.losses.paired_rows import PairedRows
from keras_dml.losses.registry import register

__all__ = ["VICReg", "covariance_term", "variance_term"]


def _centred(z):
    """z minus its column means, and the unbiased divisor max(n - 1, 1)."""
    count = keras.ops.cast(keras.ops.shape(z)[0], "float32")
    return z - keras.ops.mean(z, axis=0, keepdims=True), keras.ops.maximum(count - 1.0, 1.0)


def variance_term(z, epsilon):
    """v(Z) = 1/d sum_j max(0, 1 - sqrt(Var(z^j) + epsilon)) (VICReg eq. 1, gamma = 1)."""
    centred, divisor = _centred(z)
    std = keras.ops.sqrt(keras.ops.sum(keras.ops.square(centred), axis=0) / divisor + epsilon)
    return keras.ops.mean(keras.ops.relu(1.0 - std))


def covariance_term(z):
    """c(Z) = 1/d sum_{i != j} C(Z)_ij^2 (VICReg eq. 3-4), C the unbiased covariance."""
    centred, divisor = _centred(z)
    covariance = keras.ops.matmul(keras.ops.transpose(centred), centred) / divisor
    off_diagonal = (keras.ops.sum(keras.ops.square(covariance))
                    - keras.ops.sum(keras.ops.square(keras.ops.diagonal(covariance))))
    return off_diagonal / keras.ops.cast(keras.ops.shape(z)[1], "float32")


@register(example={}, reference="batch", row_local=False)
class VICReg(PairedRows, PairLoss):
    """VICReg (Bardes, Ponce, LeCun, ICLR 2022, eq. 1-6), as the authors' code and PML.

    Each row of the embeddings is one instance's two views z_i and z'_i
    concatenated along the features, shape (N, 2 d), as for
    `MultipleNegativesRanking`: e.g. `Concatenate()([backbone(view_1),
    backbone(view_2)])`. Labels are not used (any integer labels, e.g.
    `range(N)`). With Z, Z' the (N, d) views:

        L = lambda s(Z, Z') + mu [v(Z) + v(Z')] / 2 + nu [c(Z) + c(Z')]       (eq. 6)

        s(Z, Z') = 1/(N d) sum_i |z_i - z'_i|^2                              (eq. 5)
        v(Z) = 1/d sum_j max(0, 1 - sqrt(Var(z^j) + epsilon))                 (eq. 1)
        c(Z) = 1/d sum_{j != k} C(Z)_jk^2                                     (eq. 3-4)

    with the unbiased variance and covariance C(Z) over the batch. As the authors'
    code and pytorch-metric-learning's `VICRegLoss`, the invariance is the mean
    squared error over the N d entries (the paper's eq. 5 divides by N only) and the
    two variance terms are averaged. One value per batch (a scalar). The invariance
    term is the engine's: the (N, N) squared distances between the views, with its
    exact weights lambda / (N d) on the diagonal (each instance's own pair, its
    positive; there are no negatives); variance and covariance are a term of the
    embeddings (`penalty`), differentiated by the backend. A batch of one instance
    has zero variance and covariance (PML gives NaN).

    Args:
        invariance_lambda: lambda. Defaults to 25 (PML's and the paper's).
        variance_mu: mu. Defaults to 25.
        covariance_v: nu. Defaults to 1.
        eps: epsilon in the standard deviation. Defaults to 1e-4.
        reduction, name, dtype: as for `keras.losses.Loss`.

    Examples:

    >>> view_1 = keras.Input((32, 32, 3)); view_2 = keras.Input((32, 32, 3))
    >>> pairs = keras.layers.Concatenate()([backbone(view_1), backbone(view_2)])  # doctest: +SKIP
    >>> model = keras_dml.models.DMLModel([view_1, view_2], pairs)  # doctest: +SKIP
    >>> model.compile("adam", loss=keras_dml.losses.VICReg())  # doctest: +SKIP

    Reference:
        Bardes, Ponce, LeCun, "VICReg: Variance-Invariance-Covariance Regularization
        for Self-Supervised Learning", ICLR 2022.
    """

    row_pair = "an instance's two views"
    default_metric = "squared_euclidean"
    metrics = ("squared_euclidean",)
    config_keys = ("invariance_lambda", "variance_mu", "covariance_v", "eps")

    def __init__(self, invariance_lambda=25.0, variance_mu=25.0, covariance_v=1.0, eps=1e-4,
                 *, reduction="sum_over_batch_size", name="vicreg", dtype=None):
        super().__init__(miner=None, reduction=reduction, name=name, dtype=dtype)
        self.invariance_lambda = float(_hyper.non_negative("invariance_lambda",
                                                           invariance_lambda))
        self.variance_mu = float(_hyper.non_negative("variance_mu", variance_mu))
        self.covariance_v = float(_hyper.non_negative("covariance_v", covariance_v))
        self.eps = float(_hyper.positive("eps", eps))

    def check_reference(self, reference, embeddings):
        raise ValueError("VICReg compares the two halves of each row: it takes no reference "
                         f"set, got {type(reference).__name__}.")

    def pairs(self, labels, reference, matrix):
        """Row i's positive is its own second view, column i; no negatives. The
        context is the views' dimension d."""
        own = keras.ops.eye(keras.ops.shape(matrix)[0], dtype="bool")
        width = keras.ops.cast(keras.ops.shape(reference.embeddings)[1], "float32")
        return Pairs(labels, reference.labels, own, keras.ops.zeros_like(own),
                     context=width / 2.0)

    def compute_terms(self, matrix, pairs):
        count = keras.ops.cast(keras.ops.shape(matrix)[0], "float32")
        weight = self.invariance_lambda / (count * pairs.context)
        value = weight * keras.ops.sum(keras.ops.diagonal(matrix))
        return value, weight * keras.ops.cast(pairs.positive, "float32")

    def penalty(self, labels, embeddings):
        """mu [v(Z) + v(Z')] / 2 + nu [c(Z) + c(Z')], by the backend's autodiff."""
        views = keras.ops.split(embeddings, 2, axis=1)
        variance = sum(variance_term(z, self.eps) for z in views) / 2.0
        covariance = sum(covariance_term(z) for z in views)
        return self.variance_mu * variance + self.covariance_v * covariance
