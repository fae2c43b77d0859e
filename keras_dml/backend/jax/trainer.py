"""`DMLModel`'s train step on JAX: Keras' stateless step with the NaN guard.

The loss is `DMLModel.compute_loss`, called by Keras' `compute_loss_and_updates`
with the loss-owned weights (proxies, margins) among the traced trainable
variables. Under `keras.distribution.DataParallel` the jitted step works on global
arrays sharded over the devices, so the loss sees every pair of the global batch
without a gather.
"""

import jax
import jax.numpy as jnp
import keras
import numpy as np

from keras_dml.backend.trainer import backend_inputs

__all__ = ["all_finite", "inference_function", "train_step"]


def all_finite(tensors):
    """A scalar bool: every value of every array is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(t)) for t in tensors]))


def train_step(model, state, data):
    """One stateless update of `model` (a `DMLModel`); a batch with NaN or Inf embeddings
    (or gradients) leaves every variable as it was and reports a NaN loss."""
    trainable, non_trainable, optimizer_variables, metrics_variables = state
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    grad_fn = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
    (_, aux), gradients = grad_fn(
        trainable, non_trainable, metrics_variables, x, y, sample_weight,
        training=True, optimizer_variables=optimizer_variables)
    loss, embeddings, new_non_trainable, metrics_variables = aux
    new_trainable, new_optimizer_variables = _apply(
        model, gradients, trainable, optimizer_variables, new_non_trainable)
    # As on TensorFlow: a LossScaleOptimizer skips overflowing gradients itself.
    checked = [embeddings] if isinstance(
        model.optimizer, keras.optimizers.LossScaleOptimizer) else [embeddings] + gradients
    finite = all_finite(checked)

    def kept(new, old):
        return jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)

    trainable = kept(new_trainable, trainable)
    optimizer_variables = kept(new_optimizer_variables, optimizer_variables)
    non_trainable = kept(new_non_trainable, non_trainable)  # BatchNorm statistics, memory
    loss = jnp.where(finite, loss, jnp.nan)
    logs, metrics_variables = model._update_metrics_variables(
        metrics_variables, loss, x, y, embeddings, sample_weight)
    return logs, (trainable, non_trainable, optimizer_variables, metrics_variables)


def _apply(model, gradients, trainable, optimizer_variables, non_trainable):
    """`optimizer.stateless_apply`, with the model's non-trainable values mapped too: a
    weight's constraint may read one (`Proxies(learning_rate_multiplier=...)` reads
    the step origin its forward pass recorded). Returns the new trainable and
    optimizer values."""
    variables, optimizer = model.trainable_variables, model.optimizer
    mapping = (list(zip(variables, trainable)) + list(zip(optimizer.variables, optimizer_variables))
               + list(zip(model.non_trainable_variables, non_trainable)))
    with keras.StatelessScope(state_mapping=mapping) as scope:
        optimizer.apply(gradients, variables)
    return ([scope.get_current_value(v) for v in variables],
            [scope.get_current_value(v) for v in optimizer.variables])


def inference_function(model):
    """`model(x, training=False)`, jitted once for a Keras layer (the variables' current
    values are read at every call), else `model` called as it is. TensorFlow tensors (a
    tf.data stream's batches) are fed as NumPy arrays.

    A batch smaller than the largest one compiled so far (the last of a pass, or one
    that lost its unreadable files) is padded with zeros to that size and the padding's
    rows dropped from the result: one compilation serves the whole pass, where each
    new batch size would compile the model again. Keras' layers embed each row on its
    own in inference, so the padding changes no other row."""
    if not isinstance(model, keras.Layer):
        return lambda x: model(backend_inputs(x), training=False)

    @jax.jit
    def forward(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, training=False)[0]

    largest = [0]

    def embed(x):
        x = backend_inputs(x)
        rows = len(keras.tree.flatten(x)[0])
        largest[0] = max(largest[0], rows)
        padded = keras.tree.map_structure(lambda a: _padded_rows(a, largest[0]), x)
        out = forward([v.value for v in model.trainable_variables],
                      [v.value for v in model.non_trainable_variables], padded)
        return out if rows == largest[0] else keras.tree.map_structure(lambda o: o[:rows], out)

    return embed


def _padded_rows(array, rows):
    """`array` with zero rows appended up to `rows` rows (on the host: NumPy's pad,
    where `jnp.pad` would compile a program of its own for each new shape)."""
    missing = rows - array.shape[0]
    if not missing:
        return array
    return np.pad(np.asarray(array), [(0, missing)] + [(0, 0)] * (array.ndim - 1))
