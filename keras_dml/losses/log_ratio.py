"""Log-ratio loss for continuous labels, with dense triplet sampling in O(N^2)."""

import keras
import numpy as np

from keras_dml import hyperparameters as _hyper
from keras_dml import ops, validation
from keras_dml.backend import primitives
from keras_dml.losses.base import PairLoss, Pairs
from keras_dml.losses.registry import register

__all__ = ["LogRatio"]

_LABEL_METRICS = ("squared_euclidean", "euclidean")


def _squared_differences(labels, keys):
    """Exact (N, M) squared Euclidean distances between label vectors.

    Label vectors are close to each other (that is the point of a continuous
    target), where |a|^2 - 2ab + |b|^2 loses most float32 digits; summing squared
    differences one label column at a time stays exact and O(N^2) in memory.
    """
    columns = labels.shape[1]
    if columns is None:
        return keras.ops.sum(keras.ops.square(labels[:, None, :] - keys[None, :, :]), axis=2)
    total = 0.0
    for k in range(columns):
        total += keras.ops.square(labels[:, k, None] - keys[None, :, k])
    return total


@register(labels="continuous")
class LogRatio(PairLoss):
    """Log-ratio loss (Kim et al. CVPR 2019) with dense triplet sampling.

    For an anchor a and two other samples i, j of the batch, with D the squared
    Euclidean distance between embeddings and D_y a distance between labels
    (slides, "Log-ratio Loss"):

        l(a, i, j) = ( log D(f_a, f_i) / D(f_a, f_j) - log D_y(y_a, y_i) / D_y(y_a, y_j) )^2

    Dense triplet sampling uses every triplet of the batch: L_a is the mean of
    l(a, i, j) over all unordered pairs {i, j} of the anchor's partners (every
    other sample, or its `max_triplets_per_anchor`-limited neighbourhood), and
    the batch loss is the mean over anchors. As in the authors' code, both
    distances get `epsilon` inside the log. No L2 normalisation and no margin.

    Cost. With u_ai = log(D_ai + eps) - log(D_y,ai + eps) and n_a partners,
    sum_{i<j} (u_ai - u_aj)^2 = n_a sum_i (u_ai - mean_i u_ai)^2: every triplet,
    exactly, in O(N^2) time and memory. The pair weights are exact,
    dL_a/dD_ai = 2 n_a (u_ai - mean_j u_aj) / (P_a (D_ai + eps)) with
    P_a = n_a (n_a - 1) / 2; `keras_dml.weighting.pair_weights` reports |dL/dD|,
    "positive" where the loss pulls a pair together, "negative" where it pushes.

    Labels. `y_true` is a float matrix (N, m) of label vectors (for example a pose
    or (cos, sin) of an angle), not class ids; with a precomputed label-distance
    matrix it is the integer index (N,) of each sample into that matrix.

    Args:
        label_distance: the label distance D_y: "squared_euclidean" (the
            paper's choice for poses), "euclidean", a function
            `f(y_true) -> (N, N)` on the float (N, m) labels (a registered Keras
            serializable function, if the loss is to be saved), or a precomputed
            (M, M) matrix of distances between the M training samples, indexed by
            `y_true` (stored in the config, so keep M moderate). Defaults to
            "squared_euclidean".
        max_triplets_per_anchor: if given, each anchor uses only its n nearest
            partners in label space, the largest n with n (n - 1) / 2 <=
            max_triplets_per_anchor (the paper builds batches around each
            anchor's label-space neighbours). Not needed for memory (see Cost).
            Defaults to None (all partners).
        epsilon: added to both distances inside the logs. Defaults to 1e-6.

    Examples:

    >>> angles = np.random.uniform(0, 2 * np.pi, size=(64,))
    >>> y = np.stack([np.cos(angles), np.sin(angles)], axis=1).astype("float32")
    >>> loss = keras_dml.losses.LogRatio()
    >>> value = loss(y, embeddings)

    Reference:
        Kim, Seo, Laptev, Cho, Kwak, "Deep Metric Learning Beyond Binary
        Supervision", CVPR 2019.
    """

    continuous_labels = True  # DMLModel: do not validate y as class ids
    metrics = ("squared_euclidean",)
    default_metric = "squared_euclidean"
    config_keys = ("max_triplets_per_anchor", "epsilon")

    def __init__(self, label_distance="squared_euclidean", max_triplets_per_anchor=None,
                 epsilon=1e-6, reduction="sum_over_batch_size", name="log_ratio", dtype=None):
        super().__init__(reduction=reduction, name=name, dtype=dtype)
        if isinstance(label_distance, dict):
            label_distance = keras.saving.deserialize_keras_object(label_distance)
        if keras.ops.is_tensor(label_distance):
            label_distance = keras.ops.convert_to_numpy(label_distance)
        if isinstance(label_distance, (list, tuple, np.ndarray)):
            label_distance = np.asarray(label_distance, dtype="float32")
            if (label_distance.ndim != 2 or label_distance.shape[0] != label_distance.shape[1]
                    or not np.all(np.isfinite(label_distance)) or np.any(label_distance < 0)):
                raise ValueError(
                    "A precomputed label_distance must be a square (M, M) matrix of finite "
                    f"non-negative distances, got shape {label_distance.shape}."
                )
        elif not callable(label_distance) and label_distance not in _LABEL_METRICS:
            raise ValueError(
                f"label_distance must be one of {_LABEL_METRICS}, a function or an (M, M) "
                f"matrix, got {label_distance!r}."
            )
        self.label_distance = label_distance
        self.max_triplets_per_anchor = None if max_triplets_per_anchor is None else (
            _hyper.integer_at_least("max_triplets_per_anchor", max_triplets_per_anchor, 1))
        self.epsilon = _hyper.positive("epsilon", epsilon)

    @property
    def precomputed(self):
        return isinstance(self.label_distance, np.ndarray)

    @property
    def max_partners(self):
        """Largest n with n (n - 1) / 2 <= max_triplets_per_anchor, or None."""
        if self.max_triplets_per_anchor is None:
            return None
        return int((1 + np.sqrt(1 + 8 * self.max_triplets_per_anchor)) // 2)

    # -- validation -------------------------------------------------------------------
    def check(self, labels, embeddings):
        embeddings = validation.check_embeddings(embeddings)
        labels = keras.ops.convert_to_tensor(labels)
        if self.precomputed:
            labels = validation.check_class_labels(labels, embeddings.shape[0],
                                                   name="labels (indices)")
            size = self.label_distance.shape[0]
            labels = validation.check_label_range(
                labels, size, name="labels (indices of the precomputed label_distance matrix)",
                bound="size")
            return labels, embeddings
        dtype = keras.backend.standardize_dtype(labels.dtype)
        if "float" not in dtype:
            raise ValueError(
                "LogRatio needs continuous label vectors: a float matrix (N, m), got "
                f"{dtype} labels of shape {tuple(labels.shape)}, which look like "
                "class ids. Use a class-label loss (e.g. MultiSimilarity) for class ids, or "
                "pass a precomputed label_distance matrix indexed by the labels."
            )
        if len(labels.shape) != 2:
            raise ValueError(
                "LogRatio needs continuous label vectors of shape (N, m), got shape "
                f"{tuple(labels.shape)}; reshape a scalar target to (N, 1)."
            )
        if labels.shape[0] is not None and embeddings.shape[0] is not None \
                and labels.shape[0] != embeddings.shape[0]:
            raise ValueError(
                f"labels and embeddings disagree in batch size: labels have shape "
                f"{tuple(labels.shape)}, embeddings {tuple(embeddings.shape)}."
            )
        if primitives.is_concrete(labels) and not np.all(
                np.isfinite(keras.ops.convert_to_numpy(labels))):
            raise ValueError("labels contain NaN or Inf values.")
        return ops.to_float32(labels), embeddings

    def check_reference(self, reference, embeddings):
        labels, keys = self.check(reference.labels, reference.embeddings)
        return reference._replace(labels=labels, embeddings=keys)

    # -- the engine hooks -------------------------------------------------------------
    def pair_matrix(self, embeddings, reference):
        # Centring (distances are translation invariant) keeps |a|^2 - 2ab + |b|^2 precise.
        centre = keras.ops.mean(embeddings, axis=0, keepdims=True)
        if reference.is_batch:
            return ops.pairwise(embeddings - centre, metric="squared_euclidean")
        keys = reference.embeddings if reference.trainable else keras.ops.stop_gradient(
            reference.embeddings)
        return ops.pairwise(embeddings - centre, ops.to_float32(keys) - centre,
                            metric="squared_euclidean")

    def label_matrix(self, labels, reference_labels=None):
        """The (N, M) label distances D_y between the batch and the reference set."""
        reference_labels = labels if reference_labels is None else reference_labels
        if self.precomputed:
            table = keras.ops.convert_to_tensor(self.label_distance)
            size = len(self.label_distance)
            return primitives.gather(keras.ops.reshape(table, (-1,)),
                                     labels[:, None] * size + reference_labels[None, :])
        if callable(self.label_distance):
            if reference_labels is not labels:
                raise ValueError("A label_distance function takes one batch of labels: use "
                                 "a metric name or a precomputed matrix with a reference set.")
            matrix = ops.to_float32(self.label_distance(labels))
            if len(matrix.shape) != 2:
                raise ValueError(
                    f"label_distance must return an (N, N) matrix, got shape "
                    f"{tuple(matrix.shape)}."
                )
            return matrix
        squared = _squared_differences(labels, reference_labels)
        if self.label_distance == "squared_euclidean":
            return squared
        return keras.ops.sqrt(squared)

    def pairs(self, labels, reference, matrix):
        """Every anchor's partners (no class masks); the label distances ride along."""
        label_matrix = self.label_matrix(
            labels, labels if reference.is_batch else reference.labels)
        partners = self.partners(label_matrix, exclude_self=reference.is_batch)
        if reference.own is not None:
            partners &= ~keras.ops.one_hot(reference.own, keras.ops.shape(partners)[1],
                                           dtype="bool")
        return Pairs(labels, reference.labels, partners, partners, label_matrix)

    def partners(self, label_matrix, exclude_self=True):
        """(N, M) mask of each anchor's partners: all others, or its nearest in label space."""
        others = keras.ops.ones_like(label_matrix, dtype="bool")
        if exclude_self:
            others = primitives.without_diagonal(others)
        if self.max_partners is None:
            return others
        ranked = keras.ops.where(others, label_matrix, -1.0)
        order = primitives.argsort_rows(ranked)
        rank = primitives.argsort_rows(order)
        return keras.ops.logical_and(others, rank <= (self.max_partners if exclude_self
                                                      else self.max_partners - 1))

    def compute_terms(self, matrix, pairs):
        mask = keras.ops.cast(pairs.positive, "float32")
        u = (keras.ops.log(matrix + self.epsilon)
             - keras.ops.log(keras.ops.stop_gradient(pairs.context) + self.epsilon)) * mask
        count = keras.ops.sum(mask, axis=1, keepdims=True)
        pairs_count = count * (count - 1.0) / 2.0
        # sum_{i<j} (u_i - u_j)^2 = n sum_i (u_i - mean u)^2, in the stable centred form.
        centred = (u - keras.ops.divide_no_nan(keras.ops.sum(u, axis=1, keepdims=True), count))
        centred *= mask
        scale = keras.ops.divide_no_nan(count, pairs_count)
        value = keras.ops.squeeze(scale, 1) * keras.ops.sum(keras.ops.square(centred), axis=1)
        weights = 2.0 * scale * centred / (matrix + self.epsilon)
        return value, weights

    def terms(self, labels, embeddings, reference=None):
        """As for every loss, with the pairs the loss pulls together as "positive"
        and those it pushes apart as "negative" (there are no classes)."""
        terms = super().terms(labels, embeddings, reference)
        partners = terms.positive
        return terms._replace(positive=partners & (terms.weights > 0),
                              negative=partners & (terms.weights < 0))

    def get_config(self):
        distance = self.label_distance
        if self.precomputed:
            distance = distance.tolist()
        elif callable(distance):
            distance = keras.saving.serialize_keras_object(distance)
        return {**super().get_config(), "label_distance": distance}
