"""Cross-batch memory (XBM): a pair loss of the batch against the last M embeddings.

    memory  <- enqueue(batch embeddings, labels)        (no gradient, a ring buffer)
    value   =  the wrapped loss against Reference(memory labels, memory,
               trainable=False, own=the batch's slots): the engine builds the
               (N, M) query x memory matrix and masks, empty slots (label -1) and
               each query's own copy excluded, and applies W to the batch only.
"""

import keras

from keras_dml import hyperparameters as _hyper
from keras_dml import ops, validation
from keras_dml.backend.primitives import as_tensor
from keras_dml.losses.base import PairLoss, Reference
from keras_dml.losses.registry import ENTRIES

__all__ = ["CrossBatchMemory", "MemoryBank"]


@keras.saving.register_keras_serializable(package="keras_dml")
class MemoryBank(keras.layers.Layer):
    """The ring buffer of `CrossBatchMemory`: non-trainable Keras state.

    Weights (saved and restored with a model that tracks the layer, as `DMLModel`
    does for a loss's `trainable_layer`): `embeddings` (M, d), `labels` (M,),
    `filled` (slots holding an entry, <= M), `next_slot` and `steps` (training
    calls seen). Under `tf.distribute` the variables are written once per step
    from the first replica's value; every replica computes the same update
    (the loss sees the gathered global batch), so the memories stay identical.

    `wrapped_layer` is the wrapped loss's own `trainable_layer` (Margin's learnable
    beta), or None. The bank tracks it as a sub-layer, so its weights are among the
    bank's `trainable_weights` and `weights`: a model that attaches the bank trains,
    saves and restores them. It is not part of the config: the wrapped loss
    rebuilds it.
    """

    def __init__(self, memory_size, wrapped_layer=None, **kwargs):
        super().__init__(**kwargs)
        self.memory_size = memory_size
        self.wrapped_layer = wrapped_layer

    def build(self, input_shape):
        if self.wrapped_layer is not None and not self.wrapped_layer.built:
            self.wrapped_layer.build(input_shape)
        dim = int(input_shape[-1])
        add = dict(trainable=False, aggregation="only_first_replica")
        self.embeddings = self.add_weight(shape=(self.memory_size, dim), initializer="zeros",
                                          name="embeddings", **add)
        self.labels = self.add_weight(shape=(self.memory_size,), initializer="zeros",
                                      dtype="int32", name="labels", **add)
        self.filled = self.add_weight(shape=(), initializer="zeros", dtype="int32",
                                      name="filled", **add)
        self.next_slot = self.add_weight(shape=(), initializer="zeros", dtype="int32",
                                         name="next_slot", **add)
        self.steps = self.add_weight(shape=(), initializer="zeros", dtype="int32",
                                     name="steps", **add)

    def enqueue(self, embeddings, labels, active):
        """Write the batch into the next slots (only when `active`); return its slots."""
        n = keras.ops.shape(embeddings)[0]
        next_slot = as_tensor(self.next_slot)
        slots = (next_slot + keras.ops.arange(n, dtype="int32")) % self.memory_size
        stored, stored_labels = as_tensor(self.embeddings), as_tensor(self.labels)
        written = keras.ops.where(active, keras.ops.cast(embeddings, stored.dtype),
                                  keras.ops.take(stored, slots, axis=0))
        written_labels = keras.ops.where(active, keras.ops.cast(labels, "int32"),
                                         keras.ops.take(stored_labels, slots, axis=0))
        self.embeddings.assign(keras.ops.scatter_update(stored, slots[:, None], written))
        self.labels.assign(keras.ops.scatter_update(stored_labels, slots[:, None],
                                                    written_labels))
        step = keras.ops.cast(active, "int32") * n
        self.next_slot.assign((next_slot + step) % self.memory_size)
        self.filled.assign(keras.ops.minimum(as_tensor(self.filled) + step,
                                             self.memory_size))
        return slots

    def reset(self):
        for variable in (self.embeddings, self.labels, self.filled, self.next_slot, self.steps):
            variable.assign(keras.ops.zeros(variable.shape, variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(memory_size=self.memory_size)
        return config


@keras.saving.register_keras_serializable(package="keras_dml")
class CrossBatchMemory(keras.losses.Loss):
    """Cross-batch memory (Wang et al. CVPR 2020) around a pair loss.

    Each training call first enqueues the batch's embeddings and labels (without
    gradient) into a memory of the last `memory_size` entries, then computes the
    wrapped loss with the batch as queries and the memory as keys, the batch's own
    copies excluded (a query is never its own positive):

        L = (1/N) sum_i loss_i(S[i, memory])                          (PML's form)
        L = L_batch + memory_weight * (1/N) sum_i loss_i(S[i, memory]) (XBM eq. 7)

    the second with `include_batch_loss=True`, as in the paper's code. Before
    `warmup_steps` training calls the memory stays empty and the loss is the
    wrapped loss on the batch alone (the paper starts the memory after the
    embedding has settled: XBM section 4.2).

    The memory is a `MemoryBank` layer, exposed as `trainable_layer`, so a
    `DMLModel` compiled with this loss tracks, saves and restores it. The bank
    also tracks the wrapped loss's own `trainable_layer` (Margin's learnable beta)
    as a sub-layer, so those weights are trained and saved with the model as
    they are without the wrapper. It fills in
    training steps only: `DMLModel.evaluate` / `predict` read it without writing.
    Called directly (outside `fit`), each call is a training call and enqueues,
    as pytorch-metric-learning's `CrossBatchMemory` does. Under `tf.distribute`,
    `DMLModel` hands the loss the gathered global batch, so every replica enqueues
    the same entries.

    Args:
        loss: A keras_dml `PairLoss` computed from a query x key matrix:
            MultiSimilarity, Contrastive, BinomialDeviance, (Generalized)
            LiftedStructure, NCA, InstanceCrossEntropy, Histogram,... Mining
            runs on the query x memory matrix.
        memory_size: M, entries kept (>= the global batch size). The XBM paper
            uses a memory of 5-100% of the training set.
        warmup_steps: Training calls before the memory is used. Defaults to 0.
        include_batch_loss: Add the in-batch loss (the paper's form). Defaults
            to False (PML's form: the memory includes the batch).
        memory_weight: Weight of the memory term in the paper's form (lambda).
            Defaults to 1.0.
        momentum: With a value m (MoCo uses 0.999), a `DMLModel` compiled with this
            loss keeps a momentum copy of its embedder (`keras_dml.layers.momentum`,
            saved with the model) whose outputs fill the memory instead of the
            batch's own embeddings. Defaults to None (no key encoder).

    Examples:

    >>> loss = keras_dml.losses.CrossBatchMemory(
    ...     keras_dml.losses.MultiSimilarity(miner=None), memory_size=4096)
    >>> model.compile(optimizer="adam", loss=loss)

    Reference:
        Wang et al., "Cross-Batch Memory for Embedding Learning", CVPR 2020.
    """

    updates_state = True

    def __init__(self, loss, memory_size, warmup_steps=0, include_batch_loss=False,
                 memory_weight=1.0, momentum=None, reduction="sum_over_batch_size",
                 name="cross_batch_memory", dtype=None):
        super().__init__(name=name, reduction=reduction, dtype=dtype)
        if isinstance(loss, dict):
            loss = keras.saving.deserialize_keras_object(loss)
        entry = ENTRIES.get(type(loss).__name__)
        if (not isinstance(loss, PairLoss) or entry is None or entry.reference != "any"
                or entry.labels != "classes"):
            raise ValueError(
                "CrossBatchMemory wraps a keras_dml pair loss computed from the query x key "
                "similarity matrix (MultiSimilarity, Contrastive, BinomialDeviance, ...); got "
                f"{loss!r}. Proxy losses, LiftedStructure and LogRatio have no memory form.")
        self.loss = loss
        self.memory_size = _hyper.integer_at_least("memory_size", memory_size, 1)
        self.warmup_steps = _hyper.integer_at_least("warmup_steps", warmup_steps, 0)
        self.include_batch_loss = _hyper.boolean("include_batch_loss", include_batch_loss)
        self.memory_weight = _hyper.non_negative("memory_weight", memory_weight)
        self.momentum = None if momentum is None else _hyper.below_one("momentum", momentum)
        self.trainable_layer = MemoryBank(
            self.memory_size, wrapped_layer=getattr(loss, "trainable_layer", None),
            name="cross_batch_memory")
        self._enqueue, self._keys = True, None

    @property
    def memory(self):
        """The `MemoryBank` (built on the first call or by `DMLModel.compile`)."""
        return self.trainable_layer

    def reset(self):
        """Empty the memory and restart the warm-up count."""
        if self.trainable_layer.built:
            self.trainable_layer.reset()

    def __call__(self, y_true, y_pred, sample_weight=None, enqueue=True, keys=None):
        """The loss; `enqueue=False` (evaluation) reads the memory without writing;
        `keys` (N, d), the momentum encoder's, are enqueued instead of `y_pred`."""
        self._enqueue, self._keys = bool(enqueue), keys
        try:
            return super().__call__(y_true, y_pred, sample_weight=sample_weight)
        finally:
            self._enqueue, self._keys = True, None

    def call(self, y_true, y_pred):
        labels, embeddings = validation.check_labels_and_embeddings(y_true, y_pred)
        embeddings = ops.to_float32(embeddings)
        bank = self.trainable_layer
        if not bank.built:
            bank.build(embeddings.shape)
        batch = embeddings.shape[0]
        if batch is not None and batch > self.memory_size:
            raise ValueError(f"CrossBatchMemory: a batch of {batch} does not fit a memory of "
                             f"memory_size={self.memory_size}; use memory_size >= the "
                             "global batch size.")
        active = as_tensor(bank.steps) >= self.warmup_steps
        if self._enqueue:
            keys = embeddings if self._keys is None else ops.to_float32(self._keys)
            slots = bank.enqueue(keras.ops.stop_gradient(keys), labels, active)
            bank.steps.assign_add(1)
        else:  # evaluation: no copy of the batch inside
            slots = keras.ops.full_like(labels, -1, dtype="int32")
        memory_value = self._memory_terms(labels, embeddings, slots)
        batch_value = self.loss.call(labels, embeddings)
        if self.include_batch_loss:
            memory_value = batch_value + self.memory_weight * memory_value
        return keras.ops.where(active, memory_value, batch_value)

    def _memory_terms(self, labels, embeddings, slots):
        """Per-query values of the wrapped loss against the memory (no gradient into it)."""
        bank = self.trainable_layer
        present = keras.ops.arange(self.memory_size, dtype="int32") < as_tensor(bank.filled)
        memory = Reference(keras.ops.where(present, as_tensor(bank.labels), -1),
                           keras.ops.cast(as_tensor(bank.embeddings), "float32"),
                           trainable=False, own=slots)
        return self.loss.against(labels, embeddings, memory)

    def get_config(self):
        config = super().get_config()
        config.update(loss=keras.saving.serialize_keras_object(self.loss),
                      memory_size=self.memory_size, warmup_steps=self.warmup_steps,
                      include_batch_loss=self.include_batch_loss,
                      memory_weight=self.memory_weight, momentum=self.momentum)
        return config
