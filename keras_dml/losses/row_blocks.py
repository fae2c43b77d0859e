"""Large batches in bounded memory: a pair loss computed a block of query rows at a time.

A per-query pair loss needs row a of the (N, M) matrix for value a and its
weights; nothing couples the rows but the masks' labels. So above
`ROW_BLOCKS_ABOVE_ENTRIES` matrix entries the engine never builds the matrix or
its masks: the forward pass computes values and weights a block of rows at a time
(at most `BLOCK_ENTRIES`, at least `MIN_BLOCKS` blocks; a loss's XLA terms from
`XLA_BLOCKS_FROM_ENTRIES` on, TensorFlow's kernels below). On cosine
and dot similarities it keeps each block's weights (one N x M float32 in all,
never concatenated), and the backward pass is two matmuls per block (the
normalisation's gradient applied to the (N + M, d) results), never the matrix
again. Beyond
`STORED_WEIGHTS_MAX_ENTRIES`, or on distances, the backward pass computes each
block's matrix, masks and weights again: memory is then a few blocks, for the
forward matmul and terms done twice.
"""
import tensorflow as tf

from keras_dml import ops

#: (N, M) matrices with more entries are computed in row blocks (2,048^2: 16 MB)
ROW_BLOCKS_ABOVE_ENTRIES = 2048 * 2048
#: up to this many entries (4 GB) the forward pass keeps each block's weights for the
#: backward pass (one N x M float32 in all); beyond, the backward pass computes them again
STORED_WEIGHTS_MAX_ENTRIES = 2 ** 30
#: the entries of one block, (rows, M), at most
BLOCK_ENTRIES = 2048 * 2048
#: and at least this many blocks, so that one block's temporaries stay a small part of
#: the peak just above `ROW_BLOCKS_ABOVE_ENTRIES`
MIN_BLOCKS = 8
#: from this many matrix entries on, a loss that runs its terms under XLA does so on each
#: block (10-25 % faster); below, TensorFlow's kernels: XLA's compiled code and cluster
#: temporaries hold about 80 MB more, 1.3 N x N float32 at N = 4,096 (benchmarks/README.md)
XLA_BLOCKS_FROM_ENTRIES = 8192 * 8192


def applies(loss, reference):
    """Whether `loss` against `reference` can run in row blocks (any batch size).

    The loss opts in (`row_blocks`: its value is per query, from its matrix row),
    its masks are label equality with a row-local miner or none, it has no
    differentiable parameters besides the matrix, the keys are the batch or a
    whole key set (no drawn rows, no own copies), and the step is not compiled as
    a whole by XLA (which needs static block shapes).
    """
    from keras_dml.losses.base import PairLoss  # base imports this module

    miner = loss.pair_miner
    return (loss.row_blocks
            and (miner is None or getattr(miner, "row_local", False))
            and type(loss).pairs is PairLoss.pairs
            and type(loss).parameters is PairLoss.parameters
            and reference.rows is None and reference.query_rows is None
            and reference.own is None
            and not ops.in_xla_context())


def is_large(embeddings, reference):
    """Python bool for static shapes, else a boolean tensor: more entries than the limit."""
    return _more_entries(embeddings, reference.embeddings, ROW_BLOCKS_ABOVE_ENTRIES)


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
    xla = loss.xla_terms and _more_entries(embeddings, reference.embeddings,
                                           XLA_BLOCKS_FROM_ENTRIES - 1)

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
        size = tf.maximum(1, tf.minimum(BLOCK_ENTRIES // tf.shape(keys)[0],
                                        (n + MIN_BLOCKS - 1) // MIN_BLOCKS))
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
            (tf.constant(0), _blocks(count), _blocks(count)), parallel_iterations=1)
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
                (tf.constant(0), _blocks(count), tf.zeros_like(keys)), parallel_iterations=1)
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
    more = _more_entries(embeddings, keys, STORED_WEIGHTS_MAX_ENTRIES)
    return not more if isinstance(more, bool) else tf.logical_not(more)


def _more_entries(queries, keys, limit):
    """N x M > limit: a Python bool for static shapes, else a boolean tensor."""
    n, m = queries.shape[0], keys.shape[0]
    if n is not None and m is not None:
        return n * m > limit
    return tf.cast(tf.shape(queries)[0], tf.int64) * tf.cast(tf.shape(keys)[0], tf.int64) > limit


def _blocks(count):
    return tf.TensorArray(tf.float32, size=count, infer_shape=False)
