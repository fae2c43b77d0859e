"""The loss contract: a batch (labels, embeddings) against a reference set.

A subclass states its hyperparameters (`config_keys`) and either `compute_terms` (its
value and W, the fast path) or `compute_value` (its value only: W by the backend's
autodiff); everything else (validation, float32 inside mixed precision, the (N, M)
query x key matrix, label masks, mining, the custom gradient, serialization, Keras'
reduction and `sample_weight`) lives here once. docs/architecture.md draws the data
flow.
"""

import contextlib
import typing

import keras

from keras_dml import hyperparameters, mining, ops, validation
from keras_dml.backend import gradients, primitives
from keras_dml.losses import row_blocks
from keras_dml.weighting import check_terms, value_terms, weighted_pair_loss

__all__ = ["PairLoss", "PairTerms", "Pairs", "Reference"]


class Reference(typing.NamedTuple):
    """The key side of a loss: labels (M,) and embeddings (M, d).

    Fields:
        labels: int (M,) class ids of the keys. A label < 0 marks an empty slot (an
            unfilled memory, padding): it forms no pair.
        embeddings: float (M, d); with `rows`, the batch the keys are drawn from.
        trainable: the gradient reaches the keys (proxies, the batch itself); False
            for a memory of past embeddings.
        is_batch: the keys are the batch itself: self-pairs are excluded.
        rows, query_rows: int indices into the batch (sets drawn from the batch,
            e.g. N-pair-mc's positives and anchors; a query row < 0 is padding);
            None: every row.
        own: int (N,), the key column holding each query's own copy (a memory that
            includes the batch), excluded from its pairs; -1 or None: none.
    """

    labels: typing.Any
    embeddings: typing.Any
    trainable: bool = False
    is_batch: bool = False
    rows: typing.Any = None
    query_rows: typing.Any = None
    own: typing.Any = None

    @classmethod
    def batch(cls, labels, embeddings):
        """The default reference set: the batch itself, self-pairs excluded."""
        return cls(labels, embeddings, trainable=True, is_batch=True)


class Pairs(typing.NamedTuple):
    """What `compute_terms` sees besides the matrix: query and key labels, kept masks,
    and `context`, what a loss's own `pairs` step computed with them (or None)."""

    labels: typing.Any
    reference_labels: typing.Any
    positive: typing.Any
    negative: typing.Any
    context: typing.Any = None


#: the largest (N, M) matrix whose terms run under XLA when a loss opts in (2,048^2):
#: beyond, TensorFlow's graph frees each temporary after its last reader
XLA_TERMS_MAX_ENTRIES = 2048 * 2048


class PairTerms(typing.NamedTuple):
    """One batch's value, W = d value / d matrix, masks (what `pair_weights` reads)."""

    value: typing.Any
    weights: typing.Any
    positive: typing.Any
    negative: typing.Any
    is_distance: bool
    reference: typing.Any = None


class PairLoss(keras.losses.Loss):
    """Base class of every keras_dml loss: a batch against a reference set.

    `loss(y_true, y_pred, sample_weight=None, reference=None)` takes integer class
    labels (N,) or (N, 1) and embeddings (N, d), and returns Keras' reduction
    (mean over the batch by default) of one value per query (or of one scalar, for
    a batch-global loss). `reference` is an optional `Reference`: by default the
    batch itself (self-pairs excluded), or the loss's proxies.

    A subclass writes one of two methods. `compute_terms(matrix, pairs,
    *parameters) -> (value, weights)`, the fast path: `value` is per query (N,), row
    a depending on row a of `matrix` only, with `weights[a] = d value[a] /
    d matrix[a]`; or a scalar (a batch-global value, e.g. a mean over pairs) with
    `weights = d value / d matrix`, (N, M) either way. Or `compute_value(matrix,
    pairs, *parameters) -> value` only: the engine gets W from the backend's
    autodiff (TensorFlow, JAX, PyTorch), which differentiates the value once more
    per step. The shapes are checked when the step is traced (a ValueError naming
    the loss and the shapes). Optional hooks, one each: `parameters(pairs)` for differentiable
    inputs other than the matrix (`compute_terms` then also returns their
    gradients), `penalty(labels, embeddings)` for a term that is not a function of
    the matrix (added by autodiff), `default_reference` for the key set, `pairs`
    for masks that are not label equality.

    `metric` and `miner` are keyword-only, in every subclass after its own
    hyperparameters.

    Args:
        metric: "cosine", "dot", "euclidean" or "squared_euclidean" (`metrics`
            lists those a loss accepts); None: the class's `default_metric`.
        miner: a `keras_dml.mining.Miner` or its registered name, or None.
        reduction, name, dtype: as for `keras.losses.Loss`.
    """

    default_metric = "cosine"
    metrics = ops.METRICS
    #: the constructor arguments `get_config` records (besides Keras' name, reduction
    #: and dtype), read from the attributes of the same name; the miner is serialized
    config_keys = ("metric", "miner")
    #: constructor arguments deliberately not saved (deprecated aliases); `register`
    #: refuses an argument that is in neither `config_keys` nor here
    unsaved_keys = ()
    #: run `compute_terms` as one XLA cluster (`jit_compile`) for terms that are many
    #: elementwise passes over the (N, M) matrix, one per op with TensorFlow's CPU
    #: kernels, which XLA fuses (docs/architecture.md). Off by default; a loss opts in.
    #: Only up to `XLA_TERMS_MAX_ENTRIES` matrix entries: XLA keeps its inputs and
    #: fused temporaries alive through the cluster (about 5 N x N float32 at the peak
    #: against 3 for TensorFlow's graph), which matters at large N only.
    xla_terms = False
    #: above `row_block_limits.ROW_BLOCKS_ABOVE_ENTRIES` matrix entries, compute the values and
    #: weights a block of query rows at a time, never the whole matrix (bounded memory
    #: for large batches; `row_blocks.applies` lists the conditions). A loss opts in:
    #: its value must be per query, row a from row a of the matrix and the masks.
    row_blocks = False
    #: `compute_terms` reads `pairs.positive` / `pairs.negative`. A loss that reads only
    #: the labels (the proxy losses) turns it off: training then builds no (N, M)
    #: mask (`terms` still returns them, for `weighting.pair_weights`).
    reads_pair_masks = True

    def __init__(self, *, metric=None, miner=None, reduction="sum_over_batch_size",
                 name=None, dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        self.metric = hyperparameters.one_of(
            "metric", self.default_metric if metric is None else metric, self.metrics)
        self.miner = mining.get(miner)
        self._reference = None
        self._derivative_unchecked = type(self).compute_value is not PairLoss.compute_value

    # -- the part a subclass writes ---------------------------------------------------
    def compute_terms(self, matrix, pairs, *parameters):
        """(value, weights), plus the gradients of `parameters` when there are any.

        By default: `compute_value` and its derivatives by autodiff
        (`weighting.value_terms`)."""
        if type(self).compute_value is PairLoss.compute_value:
            raise NotImplementedError(
                f"{type(self).__name__} writes neither compute_terms(matrix, pairs) -> "
                "(value, weights) nor compute_value(matrix, pairs) -> value.")
        return value_terms(self, matrix, pairs, *parameters)

    def compute_value(self, matrix, pairs, *parameters):
        """The value alone, per query (N,) or a scalar; W comes from autodiff."""
        raise NotImplementedError

    # -- hooks --------------------------------------------------------------------------
    def parameters(self, pairs):
        """Differentiable inputs of `compute_terms` besides the matrix (Margin's beta)."""
        return ()

    def penalty(self, labels, embeddings):
        """A term that is not a function of the matrix, added to every value, or None."""
        return None

    def default_reference(self, labels, embeddings):
        """The reference set when none is given: the batch itself."""
        return Reference.batch(labels, embeddings)

    def check(self, labels, embeddings):
        """Checked (labels, embeddings); run once per call."""
        return validation.check_labels_and_embeddings(labels, embeddings)

    def check_reference(self, reference, embeddings):
        if not isinstance(reference, Reference):
            raise ValueError(f"reference must be a keras_dml.losses.Reference, got {reference!r}.")
        keys = validation.check_embeddings(reference.embeddings, name="reference embeddings")
        if keys.shape[-1] is not None and embeddings.shape[-1] is not None \
                and keys.shape[-1] != embeddings.shape[-1]:
            raise ValueError(f"reference embeddings have dimension {keys.shape[-1]}, the batch "
                             f"{embeddings.shape[-1]}.")
        labels = validation.check_class_labels(reference.labels, batch_size=keys.shape[0],
                                               name="reference labels")
        return reference._replace(labels=labels, embeddings=keys)

    @property
    def pair_miner(self):
        """The miner the engine runs on the masks (Triplet keeps its triplet miner)."""
        return self.miner

    @property
    def is_distance(self):
        return ops.is_distance(self.metric)

    # -- the engine ---------------------------------------------------------------------
    def pair_matrix(self, embeddings, reference):
        """The (N, M) query x key matrix."""
        if reference.rows is not None:
            return ops.similarities_between_rows(
                embeddings, keras.ops.maximum(reference.query_rows, 0), reference.rows,
                self.metric)
        if reference.is_batch:
            return ops.pairwise(embeddings, metric=self.metric)
        keys = reference.embeddings
        keys = keys if reference.trainable else keras.ops.stop_gradient(keys)
        return ops.pairwise(embeddings, keys, metric=self.metric)

    def pairs(self, labels, reference, matrix):
        """Query labels, key labels and the kept positive / negative masks."""
        if reference.is_batch:
            positive, negative = ops.label_masks(labels)
        else:
            present = keras.ops.expand_dims(reference.labels >= 0, 0)
            if reference.query_rows is not None:  # a row < 0 is padding
                labels = primitives.gather(labels, keras.ops.maximum(reference.query_rows, 0))
                present = keras.ops.logical_and(
                    present, keras.ops.expand_dims(reference.query_rows >= 0, 1))
            if reference.own is not None:
                own = keras.ops.one_hot(reference.own, keras.ops.shape(reference.labels)[0],
                                        dtype="bool")
                present = keras.ops.logical_and(present, keras.ops.logical_not(own))
            positive, negative = ops.label_masks(labels, reference.labels, exclude_self=False)
            positive = keras.ops.logical_and(positive, present)
            negative = keras.ops.logical_and(negative, present)
        return self.mined(labels, reference.labels, positive, negative, matrix)

    def mined(self, labels, key_labels, positive, negative, matrix):
        """`Pairs` of the masks after the pair miner (if any) has seen `matrix`."""
        if self.pair_miner is not None:
            similarity = -matrix if self.is_distance else matrix
            positive, negative = self.pair_miner(similarity, positive, negative)
        return Pairs(labels, key_labels, positive, negative)

    def prepare(self, labels, embeddings, reference=None):
        """Checked labels, float32 embeddings and the reference set (default if None)."""
        labels, embeddings = self.check(labels, embeddings)
        embeddings = ops.to_float32(embeddings)
        with _state_made_eagerly():
            if self.miner is not None:
                self.miner.bind_dimension(embeddings.shape[-1])
            layer = getattr(self, "trainable_layer", None)
            if layer is not None and not layer.built:
                layer.build((None, embeddings.shape[-1]))
        if reference is None:
            return labels, embeddings, self.default_reference(labels, embeddings)
        return labels, embeddings, self.check_reference(reference, embeddings)

    def against(self, labels, embeddings, reference):
        """Unreduced values of checked inputs against `reference`, with the engine's gradient."""
        embeddings = ops.to_float32(embeddings)
        default_pairs = (type(self).pairs is PairLoss.pairs
                         and type(self).parameters is PairLoss.parameters)
        if default_pairs and row_blocks.applies(self, reference):
            value = ops.cond(
                row_blocks.is_large(embeddings, reference),
                lambda: row_blocks.row_blocked_values(self, labels, embeddings, reference),
                lambda: self._against_whole(labels, embeddings, reference))
        else:
            value = self._against_whole(labels, embeddings, reference)
        penalty = self.penalty(labels, embeddings)
        return value if penalty is None else value + penalty

    def _against_whole(self, labels, embeddings, reference):
        """Unreduced values from the whole (N, M) matrix at once."""
        sources = [embeddings]
        separate_keys = (reference.trainable and not reference.is_batch
                         and reference.rows is None
                         and reference.embeddings is not embeddings)  # proxies
        if separate_keys:  # proxies: the gradient reaches them too
            sources.append(reference.embeddings)

        def matrix_fn(queries, *keys):
            keyed = reference._replace(embeddings=keys[0]) if keys else reference
            return self.pair_matrix(queries, keyed)

        matrix = gradients.differentiable_matrix(matrix_fn, sources)
        if self.reads_pair_masks:
            pairs = self.pairs(labels, reference, matrix.matrix)
            masks = [pairs.positive, pairs.negative]
        else:
            pairs, masks = Pairs(labels, reference.labels, None, None), []

        def terms(m, *parameters):
            # after the masks and mining: the terms' (N, M) temporaries do not coexist
            # with the miner's, and the matrix's last reader may reuse its buffer
            with primitives.control_dependencies(masks):
                return self._terms(m, pairs, *parameters)

        return weighted_pair_loss(matrix, terms, self.parameters(pairs))

    def _terms(self, matrix, pairs, *parameters):
        """`compute_terms`, through XLA where the loss opts in and the matrix is small;
        shapes checked (`weighting.check_terms`)."""
        compiled = self._compiled_terms() if self.xla_terms else None
        if compiled is None:
            out = self.compute_terms(matrix, pairs, *parameters)
        else:
            small = primitives.num_elements(matrix) <= XLA_TERMS_MAX_ENTRIES
            out = ops.cond(small, lambda: compiled(matrix, pairs, *parameters),
                           lambda: self.compute_terms(matrix, pairs, *parameters))
        return check_terms(self, out, matrix, parameters)

    def _compiled_terms(self):
        """`compute_terms` as one XLA cluster on TensorFlow (made on first use); None on
        JAX, whose whole step is jitted, and PyTorch."""
        if not hasattr(self, "_xla_compute_terms"):
            self._xla_compute_terms = primitives.xla_compiled(self.compute_terms)
        return self._xla_compute_terms

    def terms(self, labels, embeddings, reference=None):
        """The engine's `PairTerms` of one batch (what `weighting.pair_weights` reads)."""
        labels, embeddings, reference = self.prepare(labels, embeddings, reference)
        matrix = self.pair_matrix(embeddings, reference)
        pairs = self.pairs(labels, reference, matrix)
        parameters = self.parameters(pairs)
        value, weights = check_terms(self, self.compute_terms(matrix, pairs, *parameters),
                                     matrix, parameters)[:2]
        return PairTerms(value, weights, pairs.positive, pairs.negative, self.is_distance,
                         reference)

    # -- keras.losses.Loss ------------------------------------------------------------
    def __call__(self, y_true, y_pred, sample_weight=None, reference=None):
        labels, embeddings, reference = self.prepare(y_true, y_pred, reference)
        if embeddings.shape[0] == 0:  # no pair: 0, with a zero gradient
            empty = keras.ops.sum(ops.to_float32(y_pred), axis=1) * 0.0
            return empty if self.reduction in (None, "none") else keras.ops.sum(empty)
        if self._derivative_unchecked and primitives.is_concrete(embeddings):
            # W by autodiff: its finiteness is checked on concrete values, once (inside
            # the engine's custom gradient they are traced on JAX)
            self.terms(labels, embeddings, reference)
            self._derivative_unchecked = False
        self._reference = (labels, reference)
        try:
            value = super().__call__(labels, embeddings, sample_weight=sample_weight)
        finally:
            self._reference = None
        return validation.check_no_overflow(value, embeddings, type(self).__name__)

    def call(self, y_true, y_pred):
        if self._reference is None:  # called directly, not through __call__
            labels, embeddings, reference = self.prepare(y_true, y_pred)
        else:
            (labels, reference), embeddings = self._reference, y_pred
        return self.against(labels, embeddings, reference)

    def get_config(self):
        """Keras' name, reduction and dtype, and each of `config_keys` (the miner
        serialized). An unregistered class is an error here, at save time, rather
        than when the file is loaded."""
        name = keras.saving.get_registered_name(type(self))
        if keras.saving.get_registered_object(name) is not type(self):
            raise ValueError(
                f"{type(self).__name__} is not registered, so a saved model could not be "
                f"loaded: decorate it with @keras_dml.losses.register() (registered as "
                f"\"Custom>{type(self).__name__}\").")
        config = super().get_config()
        for key in self.config_keys:
            value = getattr(self, key)
            config[key] = mining.serialize(value) if key == "miner" else value
        return config


def _state_made_eagerly():
    """A context in which a loss's own state (proxies, a miner's buffers) made at its
    first call holds values, not tracers, even inside a bare `jax.jit`: on JAX
    `jax.ensure_compile_time_eval`, a variable made in a trace would leak its
    tracer into every later call."""
    if keras.backend.backend() != "jax":
        return contextlib.nullcontext()
    import jax

    return jax.ensure_compile_time_eval()
