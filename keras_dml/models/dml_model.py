"""`DMLModel`: a Keras model whose loss sees the whole (global) batch of embeddings."""

import math
import os
import warnings
import weakref

import keras
import numpy as np

from keras_dml import backend, losses, validation
from keras_dml.backend.trainer import is_tf_dataset, steps
from keras_dml.data.image_errors import clear_data_error

__all__ = ["DMLModel", "StopOnNonFinite", "gather_across_replicas", "global_batch_loss"]

NONFINITE_MESSAGE = (
    "keras_dml: NaN or Inf in the embeddings or gradients of a training batch; the "
    "update from that batch was skipped and training stopped (check the input "
    "pipeline for NaN pixels, lower the learning rate, or clip gradients; with a "
    "proxy loss under jit_compile=True, labels outside [0, num_classes) also give NaN)."
)


#: Under a LossScaleOptimizer, a loss scale below this means the gradients overflowed
#: on step after step (from the default 2**15, at least 16 skipped steps in a row).
MIN_LOSS_SCALE = 1.0


class StopOnNonFinite(keras.callbacks.Callback):
    """Raise a clear error as soon as a training batch reported a non-finite loss,
    or a mixed-precision loss scale collapsed (a stream of skipped steps)."""

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            raise FloatingPointError(f"{NONFINITE_MESSAGE} (batch {batch})")
        scale = getattr(self.model.optimizer, "dynamic_scale", None)
        if scale is not None and float(scale) < MIN_LOSS_SCALE:
            raise FloatingPointError(
                f"keras_dml: the mixed-precision loss scale fell to {float(scale):.3g}: the "
                "gradients overflowed on step after step and no update was applied "
                f"(optimizer.iterations = {int(self.model.optimizer.iterations)}); check the "
                f"input for huge or non-finite values, lower the learning rate, or train in "
                f"float32 (batch {batch}).")


def gather_across_replicas(embeddings, labels, sample_weight=None):
    """Embeddings, labels and sample weights of the global batch under `tf.distribute`
    (TensorFlow only): `keras_dml.backend.tensorflow.trainer.gather_across_replicas`."""
    backend.require_tensorflow("tf.distribute gathering")
    from keras_dml.backend.tensorflow import trainer

    return trainer.gather_across_replicas(embeddings, labels, sample_weight)


def _create_checkpoint_folders(callbacks):
    """Create each `ModelCheckpoint`'s folder before training. Keras creates it at the
    first save with a check then a create, which the workers of a multi-worker run,
    saving together, can race on (FileExistsError)."""
    for callback in callbacks:
        if isinstance(callback, keras.callbacks.ModelCheckpoint):
            folder = os.path.dirname(str(callback.filepath))
            if not folder or "{" in folder:  # a folder named by the epoch is Keras' to make
                continue
            if "://" in folder:  # gs://, hdfs://: TensorFlow's file systems
                backend.require_tensorflow(f"the checkpoint folder {folder}").io.gfile.makedirs(
                    folder)
            else:
                os.makedirs(folder, exist_ok=True)


@keras.saving.register_keras_serializable(package="keras_dml")
class DMLModel(keras.Model):
    """A `keras.Model` for deep metric learning, built functionally.

    `DMLModel(inputs, outputs)` maps images to embeddings. Compile it with a
    keras_dml loss and fit it on `(images, labels)` or `(images, labels,
    sample_weights)` batches, e.g. from `keras_dml.data.class_balanced_batches`.

    It trains on TensorFlow, JAX and PyTorch (the steps that differ are in
    `keras_dml.backend.<backend>.trainer`), and a `.keras` file saved under one
    backend loads under another. What it adds to `keras.Model`:
    - Under `tf.distribute`, the loss sees the embeddings and labels of the global
      batch gathered from all replicas (pair losses need every pair), and the update
      equals single-device training on the concatenated batch. On JAX, under
      `keras.distribution.DataParallel`, the loss sees the global batch too.
    - A loss that owns trainable weights (learnable proxies, margins), exposed as the
      loss's `trainable_layer`, is attached to the model at `compile`: its weights are
      in `model.trainable_weights`, trained, and saved / restored with the model.
      `embedder()` returns the embedding network alone, without them.
    - NaN or Inf embeddings (or gradients) stop training with a clear error before any
      update is applied from that batch, on every backend (in eager mode the loss
      raises a ValueError).
    - The progress bar and `History` show the real loss; `evaluate` reports it.
    - `compile(loss=[a, b], loss_weights=[1.0, 0.5])` trains on a
      `keras_dml.losses.Combined` of the losses; each term is also shown.
    - `fit` on a keras_dml stream (`keras_dml.data.class_balanced_batches`, ...)
      records the stream's `keras_dml.data.Preprocessing` as `preprocessing`, saved
      in the `.keras` file (its evaluation transform is what an export decodes
      images with), and warns when the model rescales its inputs itself while the
      stream already normalises them.
    """

    def get_config(self):
        config = super().get_config()
        if getattr(self, "preprocessing", None) is not None:
            config["preprocessing"] = self.preprocessing.to_dict()
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        preprocessing = config.pop("preprocessing", None)
        model = super().from_config(config, custom_objects=custom_objects)
        if preprocessing is not None:
            from keras_dml.data.preprocessing import Preprocessing

            model.preprocessing = Preprocessing.from_dict(preprocessing)
        return model

    def compile(self, optimizer="rmsprop", loss=None, **kwargs):
        if isinstance(loss, (str, dict)):
            loss = losses.get(loss)
        if isinstance(loss, (list, tuple)):  # a weighted sum, each term on the same batch
            loss = losses.Combined(loss, weights=kwargs.pop("loss_weights", None))
        if isinstance(loss, (list, tuple, dict)):
            raise ValueError("DMLModel takes a single keras_dml loss, got a structure of losses.")
        if loss is not None and not isinstance(loss, keras.losses.Loss):
            raise ValueError(
                "DMLModel needs a keras_dml loss, a keras.losses.Loss of (labels, embeddings) "
                f"such as keras_dml.losses.MultiSimilarity(), got {loss!r}."
            )
        if loss is not None:
            _check_reduced(loss)
        self._attach_loss_layer(loss)
        self._attach_key_encoder(loss)
        # tracked, their states are model variables: a jitted JAX step advances them
        self.loss_seed_generators = _seed_generators(loss)
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        # The loss is `compute_loss`'s, never Keras' CompileLoss: left unbuilt, that would
        # make every later `fit` pull a batch from the dataset to build it.
        self._compile_loss = None
        self.dml_loss = loss

    def compile_from_config(self, config):
        """Recompile from a saved `.keras` file (the overridden `compile` is safe to call)."""
        config = keras.saving.deserialize_keras_object(_public_optimizer_modules(config))
        self.compile(**config)
        if getattr(self, "optimizer", None) is not None and self.built:
            self.optimizer.build(self.trainable_variables)

    def _attach_loss_layer(self, loss):
        layer = getattr(loss, "trainable_layer", None)
        if layer is None:
            return
        if not layer.built:
            layer.build((None, self.embedding_dim))
        self.loss_layer = layer

    def _attach_key_encoder(self, loss):
        momentum = getattr(loss, "momentum", None)
        if momentum is None or getattr(self, "key_encoder", None) is not None:
            return
        from keras_dml.layers.momentum import MomentumEncoder

        encoder = MomentumEncoder(momentum, name="momentum_encoder")
        encoder.track(self.encoder_variables())
        self.key_encoder = encoder

    def encoder_variables(self):
        """The embedding network's variables (not the loss's nor the key encoder's)."""
        skip = set()
        for name in ("loss_layer", "key_encoder"):
            layer = getattr(self, name, None)
            if layer is not None:
                skip.update(id(v) for v in layer.weights)
        return [v for v in self.weights if id(v) not in skip]

    @property
    def embedding_dim(self):
        shape = self.outputs[0].shape
        if len(shape) != 2 or shape[-1] is None:
            raise ValueError(
                f"DMLModel outputs must be embeddings of shape (batch, dim), got {tuple(shape)}."
            )
        return int(shape[-1])

    def embedder(self):
        """The embedding network alone (a plain `keras.Model`, no loss weights), with the
        inputs' structure of this model, and its recorded `preprocessing` (the one image
        files are embedded with) when it has one."""
        embedder = keras.Model(self.input, self.output, name=f"{self.name}_embedder")
        if getattr(self, "preprocessing", None) is not None:
            embedder.preprocessing = self.preprocessing
        return embedder

    # -- training ---------------------------------------------------------------------
    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        """The keras_dml loss of the batch of embeddings `y_pred` with labels `y`, plus the
        model's regularization losses: what Keras' JAX and PyTorch steps minimise. In
        training, a momentum key encoder is updated first and encodes the keys of `x`."""
        keys = self.momentum_keys(x) if training else None
        return self.dml_loss_value(y, y_pred, sample_weight, training, keys)

    def momentum_keys(self, x):
        """With a momentum key encoder (MoCo): update it, then return the keys of `x`;
        None without one."""
        encoder = getattr(self, "key_encoder", None)
        if encoder is None:
            return None
        encoder.update(self.encoder_variables())
        return encoder.keys(self, x)

    def dml_loss_value(self, y, embeddings, sample_weight, training, keys=None):
        """The loss of the global batch (gathered across `tf.distribute` replicas on
        TensorFlow) plus the regularization losses; `keys` are a momentum encoder's."""
        if getattr(self, "dml_loss", None) is None:
            raise ValueError("DMLModel needs a loss: call compile(optimizer, loss=...) first.")
        if y is None:
            raise ValueError("DMLModel needs labels: the dataset must yield (images, labels).")
        replicas = 1
        if backend.is_tensorflow():
            if not getattr(self.dml_loss, "continuous_labels", False):
                y = validation.check_class_labels(y)
            embeddings, y, sample_weight, keys = steps().global_batch(
                embeddings, y, sample_weight, keys)
            replicas = steps().replicas()
        elif keys is not None:
            keys = keras.ops.stop_gradient(keys)
        memory = {"enqueue": training} if getattr(self.dml_loss, "updates_state", False) else {}
        if keys is not None:
            memory["keys"] = keys
        value = global_batch_loss(self.dml_loss, y, embeddings, sample_weight, **memory)
        extra = self.losses
        if extra:  # regularizers: each replica adds its 1 / num_replicas share, as Keras does
            value = value + sum(keras.ops.cast(term, value.dtype) for term in extra) / replicas
        return value

    def train_step(self, *args):
        """`(data)` on TensorFlow and PyTorch, `(state, data)` on JAX: the steps that differ
        by backend are in `keras_dml.backend.<backend>.trainer`: TensorFlow keeps its
        `tf.GradientTape` step with `tf.distribute` gathering; JAX and PyTorch run
        Keras' own steps around `compute_loss`, each with the NaN guard."""
        return steps().train_step(self, *args)

    def test_step(self, *args):
        if backend.is_tensorflow():
            return steps().test_step(self, *args)
        return super().test_step(*args)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        """Build from one replica's share of the first batch (keras-team/keras#20585).

        Keras 3 reduces the first distributed batch with `strategy.reduce("MEAN",
        batch, axis=None)` only to read its shapes; MultiWorkerMirroredStrategy
        cannot reduce a PerReplica value eagerly, so `fit` failed on several workers.
        One replica's local batch has the same shapes, costs no collective, and
        works under every strategy.
        """
        if not backend.is_tensorflow():
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
        if self._distribute_strategy is None:
            # As Keras, the rest is built when the step is traced; but an optimizer built
            # there creates its variables inside the first trace, which makes TensorFlow
            # trace the whole step twice (about 0.5 s more on the Omniglot protocol).
            self._build_optimizer_before_tracing()
            return
        with self.distribute_strategy.scope():
            # Keras pulls a batch from `iterator` only when something is unbuilt: a
            # later `fit` or `evaluate` call starts no extra pass over the dataset.
            self._symbolic_build(iterator=steps().local_batches(iterator),
                                 data_batch=data_batch)

    def _build_optimizer_before_tracing(self):
        """Build the optimizer on the trainable variables when every layer is built (the
        loss-owned weights are, at `compile`): none is created later."""
        optimizer = getattr(self, "optimizer", None)
        if (optimizer is not None and not optimizer.built
                and all(layer.built for layer in self._flatten_layers())):
            optimizer.build(self.trainable_variables)

    def fit(self, x=None, y=None, *args, callbacks=None, **kwargs):
        endless = isinstance(x, keras.utils.PyDataset) and x.num_batches is None
        if (is_tf_dataset(x) or endless) and len(args) < 7:
            # A dataset (a keras_dml stream) orders itself: Keras would warn on every call
            # that its default shuffle=True is ignored. (args[6] is a positional shuffle.)
            kwargs.setdefault("shuffle", False)
        self._check_first_labels(x, y)
        self._record_stream_preprocessing(x)
        callbacks = list(callbacks or [])
        if not any(isinstance(c, StopOnNonFinite) for c in callbacks):
            callbacks.append(StopOnNonFinite())
        _create_checkpoint_folders(callbacks)
        try:
            return super().fit(x, y, *args, callbacks=callbacks, **kwargs)
        except Exception as error:  # a bad image file: its own error, naming it
            clear = clear_data_error(error)
            if clear is None:
                raise
            raise clear from None

    def _record_stream_preprocessing(self, x):
        """Keep a keras_dml stream's `Preprocessing` (saved with the model); warn when
        the model normalises its inputs again, or in one line when `x` was made from
        a stream by a transformation that dropped it."""
        from keras_dml.data.stream_preprocessing import (lost_preprocessing,
                                                         stream_preprocessing,
                                                         warn_if_normalised_twice)

        preprocessing = stream_preprocessing(x)
        lost = lost_preprocessing(x)
        if lost:
            warnings.warn(lost, stacklevel=3)
        if preprocessing is not None:
            warn_if_normalised_twice(self, preprocessing)
            self.preprocessing = preprocessing

    def _check_first_labels(self, x, y):
        """Labels are checked where they enter, with a ValueError naming the values, in
        eager, graph and XLA alike: all of an array `y`, or the first batch of a dataset
        (a `tf.data.Dataset` or a `keras.utils.PyDataset`; once per dataset: each check
        starts a pass over it)."""
        if getattr(self.dml_loss, "continuous_labels", False):
            return
        dataset = None  # set when `y` is the first batch of dataset `x`
        if y is None and isinstance(x, keras.utils.PyDataset):
            checked = self.__dict__.setdefault("_datasets_checked", weakref.WeakSet())
            if x in checked or x.num_batches == 0:  # None: infinite (no len)
                return
            batch = x[0]
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                return
            y, dataset = batch[1], x
        elif y is None and is_tf_dataset(x, distributed=False):
            spec = x.element_spec
            if not isinstance(spec, tuple) or len(spec) < 2:
                return
            if spec[1].dtype.name == "string":
                validation.check_label_values(np.array(["<string>"]))
            checked = self.__dict__.setdefault("_datasets_checked", weakref.WeakSet())
            if x in checked:
                return
            y, dataset = next(iter(x.take(1)))[1], x
        if y is not None and not isinstance(y, (dict, list)):
            validation.check_label_values(np.asarray(y),
                                          getattr(self.dml_loss, "num_classes", None))
        if dataset is not None:
            checked.add(dataset)  # its first batch passed


def _seed_generators(loss):
    """The `keras.random.SeedGenerator`s of `loss`, of its miner, and of the losses it
    wraps (`Combined`'s terms, `CrossBatchMemory`'s loss), each once."""
    found = {}

    def visit(value):
        if isinstance(value, keras.random.SeedGenerator):
            found.setdefault(id(value), value)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, keras.losses.Loss):
            for attribute in vars(value).values():
                visit(attribute)
        elif getattr(value, "seed_generator", None) is not None:  # a miner
            visit(value.seed_generator)

    visit(loss)
    return list(found.values())


def _public_optimizer_modules(config):
    """`config` with Keras' PyTorch optimizer modules named by their public module.

    Keras 3.15 on PyTorch saves e.g. Adam as `keras.src.backend.torch.optimizers.
    torch_adam.Adam`: loading that under another backend would give a PyTorch
    optimizer. `keras.optimizers.Adam` is the same optimizer on every backend.
    """
    if isinstance(config, dict):
        module = config.get("module")
        if isinstance(module, str) and module.startswith("keras.src.backend.torch.optimizers"):
            config = {**config, "module": "keras.optimizers"}
        return {key: _public_optimizer_modules(value) for key, value in config.items()}
    if isinstance(config, list):
        return [_public_optimizer_modules(value) for value in config]
    return config


_MEAN_REDUCTIONS = ("sum_over_batch_size", "mean", "mean_with_sample_weight")


def _reductions(loss):
    """The reductions Keras applies inside `loss(...)`: a `Combined`'s are its terms'."""
    terms = loss.losses if isinstance(loss, losses.Combined) else [loss]
    return {term.reduction for term in terms}


def _check_reduced(loss):
    for reduction in _reductions(loss):
        if reduction in (None, "none"):
            raise ValueError(
                f"DMLModel trains on one loss value per batch, but {loss.name} has "
                f"reduction={reduction!r}; use reduction='sum_over_batch_size' (the default), "
                "'mean_with_sample_weight' or 'sum'.")


def global_batch_loss(loss, labels, embeddings, sample_weight=None, **state):
    """`loss(labels, embeddings, sample_weight=sample_weight, **state)` of the gathered
    global batch, equal to its value on one device, on every replica.

    Keras' reduction (`reduce_values`, keras/src/losses/loss.py) multiplies a
    mean-reduced loss by 1 / num_replicas, because Keras sums the replicas'
    gradients of losses computed on disjoint shards. It skips that for a "sum" and
    for weighted values that are a scalar (a batch-global loss without sample
    weights). Here every replica computes the loss of the whole global batch and its
    gradient reaches only its own slice (`gather_across_replicas`), so the scaling is
    undone: all-ones sample weights (which leave the value unchanged) make the weighted
    values a vector, so every mean-reduced loss is scaled, and the product by
    num_replicas restores the one-device value.
    """
    replicas = steps().replicas() if backend.is_tensorflow() else 1
    mean = {reduction in _MEAN_REDUCTIONS for reduction in _reductions(loss)}
    if replicas == 1 or mean == {False}:
        return loss(labels, embeddings, sample_weight=sample_weight, **state)
    if mean != {True}:
        raise ValueError(
            f"Under tf.distribute the terms of {loss.name} must all be mean-reduced or all "
            f"'sum'-reduced; got reductions {sorted(map(str, _reductions(loss)))}.")
    if sample_weight is None:
        sample_weight = keras.ops.ones(keras.ops.shape(embeddings)[:1], "float32")
    value = loss(labels, embeddings, sample_weight=sample_weight, **state)
    return value * keras.ops.cast(replicas, value.dtype)
