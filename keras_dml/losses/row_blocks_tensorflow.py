"""TensorFlow's row-blocked pair loss: `tf.while_loop` over blocks of query rows.

`keras_dml.losses.row_blocks` describes the scheme; this is its TensorFlow form,
whose forward pass keeps each block's weights in a `tf.TensorArray` (never
concatenated into a second (N, M) copy) and whose loops run with dynamic shapes.
"""

import tensorflow as tf

from keras_dml import ops
from keras_dml.backend.tensorflow.row_blocks import block_array
from keras_dml.losses import row_block_limits as limits

__all__ = ["row_blocked_values"]


def row_blocked_values(loss, labels, embeddings, reference):
    """Per-query values of `loss` (N,) against `reference`, with the engine's gradient.

    Equal to `loss.against` on the whole matrix (up to float rounding of the
    blocked matmuls); the gradient reaches the embeddings and, for trainable
    keys that are not the batch (proxies), the keys.
    """
    batch = reference.is_batch
    separate_keys = not batch and reference.trainable
    sources = [embeddings]
    if separate_keys:
        sources.append(tf.convert_to_tensor(reference.embeddings))
    fixed_keys = None if batch or separate_keys else tf.stop_gradient(reference.embeddings)
    n = tf.shape(embeddings)[0]
    store = _stores_weights(loss.metric, embeddings, reference.embeddings)
    xla = loss.xla_terms and limits.more_entries(embeddings, reference.embeddings,
                                           limits.XLA_BLOCKS_FROM_ENTRIES - 1)

    def block_terms(start, matrix):
        rows = tf.shape(matrix)[0]
        query_labels = labels[start:start + rows]
        if batch:  # label equality, without the block's own columns start, start + 1, ...
            positive, negative = ops.label_masks(query_labels, labels, exclude_self=False)
            positive &= ~tf.one_hot(tf.range(start, start + rows), tf.shape(matrix)[1],
                                    on_value=True, off_value=False)
            pairs = loss.mined(query_labels, labels, positive, negative, matrix)
        else:  # a whole key set: the engine's own masks for these queries
            pairs = loss.pairs(query_labels, reference, matrix)
        with tf.control_dependencies([pairs.positive, pairs.negative]):
            return ops.cond(xla, lambda: loss._terms(matrix, pairs)[:2],
                            lambda: loss.compute_terms(matrix, pairs)[:2])

    @tf.custom_gradient
    def values(*inputs):
        queries = inputs[0]
        keys = queries if batch else (inputs[1] if separate_keys else fixed_keys)
        size = tf.maximum(1, tf.minimum(limits.BLOCK_ENTRIES // tf.shape(keys)[0],
                                        (n + limits.MIN_BLOCKS - 1) // limits.MIN_BLOCKS))
        count = (n + size - 1) // size
        no_weights = tf.zeros([0, tf.shape(keys)[0]])

        def forward(i, values, weights):
            start = i * size
            matrix = ops.pairwise(queries[start:start + size], keys, loss.metric)
            value, block_weights = block_terms(start, matrix)
            kept = ops.cond(store, lambda: block_weights, lambda: no_weights)
            return i + 1, values.write(i, value), weights.write(i, kept)

        _, values, weights = tf.while_loop(
            lambda i, *_: i < count, forward,
            (tf.constant(0), block_array(count), block_array(count)), parallel_iterations=1)
        value = tf.reshape(values.concat(), [-1])
        value.set_shape(embeddings.shape[:1])

        def from_weights(upstream):  # W's blocks, never concatenated into a second copy
            return ops.similarity_gradients(queries, keys, weights, upstream, loss.metric,
                                            key_gradient=fixed_keys is None, block_rows=size)

        def recomputed(upstream):
            def backward(i, query_grads, key_grad):
                start = i * size
                block = queries[start:start + size]  # sliced outside the tape: its own source
                targets = [block] if fixed_keys is not None else [block, keys]
                with tf.GradientTape() as tape:
                    tape.watch(targets)
                    matrix = ops.pairwise(block, keys, loss.metric)
                _, block_weights = block_terms(start, tf.stop_gradient(matrix))
                rows = upstream[start:start + size][:, tf.newaxis] * block_weights
                grads = tape.gradient(matrix, targets, output_gradients=rows,
                                      unconnected_gradients=tf.UnconnectedGradients.ZERO)
                if fixed_keys is None:
                    key_grad = tf.reshape(key_grad + grads[1], tf.shape(key_grad))
                return i + 1, query_grads.write(i, grads[0]), key_grad

            _, query_grads, key_grad = tf.while_loop(
                lambda i, *_: i < count, backward,
                (tf.constant(0), block_array(count), tf.zeros_like(keys)), parallel_iterations=1)
            return tf.reshape(query_grads.concat(), tf.shape(queries)), key_grad

        def grad(upstream):
            query_grad, key_grad = ops.cond(store, lambda: from_weights(upstream),
                                            lambda: recomputed(upstream))
            if batch:
                return query_grad + key_grad
            return (query_grad, key_grad) if separate_keys else query_grad

        return value, grad

    return values(*sources)


def _stores_weights(metric, embeddings, keys):
    """Whether the forward pass keeps W: a Python bool, or a boolean tensor."""
    if metric not in ("cosine", "dot"):
        return False
    more = limits.more_entries(embeddings, keys, limits.STORED_WEIGHTS_MAX_ENTRIES)
    return not more if isinstance(more, bool) else tf.logical_not(more)
