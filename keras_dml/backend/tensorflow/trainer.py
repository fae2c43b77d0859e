"""`DMLModel`'s train and test steps on TensorFlow, with `tf.distribute` gathering.

Under `tf.distribute` each replica embeds its share of the batch; the loss sees the
embeddings and labels of the global batch, gathered from all replicas, and each
replica's gradient reaches only its own slice (`gather_across_replicas`).
"""

import functools

import keras
import tensorflow as tf

__all__ = [
    "all_finite",
    "gather_across_replicas",
    "gather_with_local_gradient",
    "global_batch",
    "inference_function",
    "local_batches",
    "replicas",
    "test_step",
    "train_step",
]


def replicas():
    """Replicas in sync under the current `tf.distribute` strategy (1 without one)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


def all_finite(tensors):
    """A scalar bool: every value of every tensor is finite."""
    return tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in tensors])


def gather_with_local_gradient(tensor):
    """All-gather `tensor` over replicas; the gradient returns this replica's slice."""
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return tensor

    sizes = context.all_gather(tf.shape(tensor)[:1], axis=0)
    replica = tf.cast(context.replica_id_in_sync_group, tf.int32)
    start = tf.reduce_sum(sizes[:replica])

    @tf.custom_gradient
    def gather(local):
        def grad(upstream):
            return upstream[start:start + tf.shape(local)[0]]

        return context.all_gather(local, axis=0), grad

    gathered = gather(tensor)
    # keep the static feature shape the collective drops (a miner reads the dimension)
    gathered.set_shape(tf.TensorShape([None]).concatenate(tensor.shape[1:]))
    return gathered


def gather_across_replicas(embeddings, labels, sample_weight=None):
    """Embeddings, labels and sample weights of the global batch, in replica order.

    Outside `tf.distribute` (or with one replica) the inputs come back unchanged.
    Gradients reach each replica's own embeddings exactly: replica r receives
    dL/dE for its slice of the global batch, so summing the replicas' parameter
    gradients (what Keras optimizers do) equals single-device training on the
    concatenated batch.
    """
    embeddings = gather_with_local_gradient(embeddings)
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
        # tf.identity places an input tensor on this replica's device: a collective
        # needs one, and a batch from distribute_datasets_from_function has none.
        labels = context.all_gather(tf.identity(labels), axis=0)
        if sample_weight is not None:
            sample_weight = context.all_gather(tf.identity(sample_weight), axis=0)
    return embeddings, labels, sample_weight


def global_batch(embeddings, labels, sample_weight, keys=None):
    """The loss's inputs of the global batch, gathered across replicas; `keys` (the
    momentum encoder's) gathered without gradient."""
    embeddings, labels, sample_weight = gather_across_replicas(embeddings, labels,
                                                               sample_weight)
    if keys is not None:
        keys = gather_with_local_gradient(tf.stop_gradient(keys))
    return embeddings, labels, sample_weight, keys


def train_step(model, data):
    """One update of `model` (a `DMLModel`) on `data`; the update of a batch with NaN or
    Inf embeddings (or gradients) is skipped and its loss reported as NaN."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    keys = model.momentum_keys(x)  # before the tape: no gradient reaches the keys
    with tf.GradientTape() as tape:
        embeddings = model(x, training=True)
        loss = model.dml_loss_value(y, embeddings, sample_weight, training=True, keys=keys)
        scaled = model.optimizer.scale_loss(loss)
    variables = model.trainable_weights
    gradients = _loss_layer_gradients_once(model, tape.gradient(scaled, variables), variables)
    # Never write NaN into the weights: skip the update, report a NaN loss, and
    # `StopOnNonFinite` (added by `fit`) stops with a clear message. A
    # LossScaleOptimizer skips overflowing gradients and lowers its scale by
    # design, so there only the embeddings are checked.
    checked = [embeddings] if isinstance(
        model.optimizer, keras.optimizers.LossScaleOptimizer) else [embeddings] + gradients
    finite = all_finite([t for t in checked if t is not None])
    context = tf.distribute.get_replica_context()
    if not tf.distribute.has_strategy():  # (a strategy of one replica is no exception)
        tf.cond(finite, lambda: _apply(model.optimizer, gradients, variables), lambda: False)
    else:
        # A cond around a cross-replica update is not supported: agree on one
        # flag across replicas and apply all-zero gradients instead.
        failures = context.all_reduce("sum", 1.0 - tf.cast(finite, tf.float32))
        finite = failures < 0.5
        gradients = [None if g is None else tf.where(finite, g, tf.zeros_like(g))
                     for g in gradients]
        model.optimizer.apply(gradients, variables)
    loss = tf.where(finite, loss, tf.constant(float("nan"), loss.dtype))
    return _record(model, x, y, embeddings, sample_weight, loss)


def test_step(model, data):
    """The loss and metrics of `model` on `data`, in inference mode."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    embeddings = model(x, training=False)
    loss = model.dml_loss_value(y, embeddings, sample_weight, training=False)
    return _record(model, x, y, embeddings, sample_weight, loss)


def _apply(optimizer, gradients, variables):
    optimizer.apply(gradients, variables)
    return True


def _loss_layer_gradients_once(model, gradients, variables):
    """Every replica computes the loss on the global batch, so each holds the whole
    gradient of the loss-owned weights (proxies, margins); the optimizer sums the
    replicas' gradients, so those are divided by the number of replicas.

    (A regularizer on a loss-owned weight, which no keras_dml loss has, would
    be divided twice: its term is already divided in `DMLModel.dml_loss_value`.)"""
    count = replicas()
    layer = getattr(model, "loss_layer", None)
    if count == 1 or layer is None:
        return gradients
    owned = {id(v) for v in layer.trainable_weights}
    return [_divide(g, count) if g is not None and id(v) in owned else g
            for g, v in zip(gradients, variables)]


def _divide(gradient, count):
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values / count, gradient.indices, gradient.dense_shape)
    return gradient / count


def _record(model, x, y, embeddings, sample_weight, loss):
    model._loss_tracker.update_state(loss, sample_weight=tf.shape(embeddings)[0])
    logs = model.compute_metrics(x, y, embeddings, sample_weight=sample_weight)
    if _multi_worker(tf.distribute.get_strategy()):
        # Keras reduces each replica's logs with strategy.reduce("MEAN", v, axis=0)
        # under a multi-worker strategy, which fails on a scalar: give it one axis.
        logs = {name: tf.reshape(value, [1]) for name, value in logs.items()}
    return logs


def _multi_worker(strategy):
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


def local_batches(iterator):
    """Keras' `(step, step, [batch])` items over an epoch iterator, each batch with
    its distributed values replaced by their first local components; the
    iterator's pass over the data starts only when the first item is asked for."""
    if iterator is None:
        return
    for _, _, batches in iterator:
        yield None, None, [_first_local_value(next(batches))]
        return


def _first_local_value(value):
    """`value` (a structure of tuples, lists, dicts) with each `DistributedValues`
    replaced by its first local component."""
    if isinstance(value, tf.distribute.DistributedValues):
        return value.values[0]
    if isinstance(value, (tuple, list)):
        return type(value)(_first_local_value(v) for v in value)
    if isinstance(value, dict):
        return {k: _first_local_value(v) for k, v in value.items()}
    return value


def inference_function(model):
    """`model(x, training=False)` as a `tf.function`; build it once, embed many times.

    The first call traces it for batches of any size (the batch dimension None), so the
    short last batch of a pass, or a batch that lost its unreadable files, runs the same
    graph instead of tracing another.

    A `functools.partial`, not a lambda: TensorFlow counts retracing per Python code
    object, so every lambda made here would share one count, and the query and gallery
    functions of a few evaluations would warn of "excessive retracing"."""
    function = tf.function(functools.partial(_inference, model), reduce_retracing=True)
    traced = []

    def embed(x):
        x = tf.nest.map_structure(tf.convert_to_tensor, x)
        if not traced:
            traced.append(function.get_concrete_function(tf.nest.map_structure(_any_rows, x)))
        return function(x)

    return embed


def _any_rows(value):
    """The spec of `value` with any number of rows (a dense tensor of rank >= 1)."""
    if isinstance(value, tf.Tensor) and value.shape.rank:
        return tf.TensorSpec([None, *value.shape[1:]], value.dtype)
    return tf.type_spec_from_value(value)


def _inference(model, x):
    return model(x, training=False)
