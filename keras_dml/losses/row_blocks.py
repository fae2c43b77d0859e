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

That is TensorFlow's form (`keras_dml.losses.row_blocks_tensorflow`, a
`tf.while_loop` with dynamic shapes). On JAX and PyTorch, whose shapes are static
(JAX) or eager (PyTorch), the blocks are a Python loop over static slices, each
block the engine's `weighted_pair_loss` on its own (rows, M) matrix: the same
values and gradient, with each block's weights kept for the backward pass.
"""
import keras

from keras_dml import backend, ops
from keras_dml.backend import gradients
from keras_dml.losses import row_block_limits as limits
from keras_dml.weighting import weighted_pair_loss

__all__ = ["applies", "is_large", "row_blocked_values"]


def applies(loss, reference):
    """Whether `loss` against `reference` can run in row blocks (any batch size).

    The loss opts in (`row_blocks`: its value is per query, from its matrix row),
    its masks are label equality with a row-local miner or none, the keys are the
    batch or a whole key set (no drawn rows, no own copies), and the step is not
    compiled as a whole by XLA (which needs static block shapes). `PairLoss` asks
    this only of a loss that keeps its default `pairs` and has no differentiable
    parameters besides the matrix.
    """
    miner = loss.pair_miner
    return (loss.row_blocks
            and (miner is None or getattr(miner, "row_local", False))
            and reference.rows is None and reference.query_rows is None
            and reference.own is None
            and not ops.in_xla_context())


def is_large(embeddings, reference):
    """Python bool for static shapes, else a boolean tensor: more entries than the limit."""
    return limits.more_entries(embeddings, reference.embeddings, limits.ROW_BLOCKS_ABOVE_ENTRIES)


def row_blocked_values(loss, labels, embeddings, reference):
    """Per-query values of `loss` (N,) against `reference`, with the engine's gradient.

    Equal to `loss.against` on the whole matrix (up to float rounding of the
    blocked matmuls); the gradient reaches the embeddings and, for trainable
    keys that are not the batch (proxies), the keys.
    """
    if backend.is_tensorflow():
        from keras_dml.losses import row_blocks_tensorflow

        return row_blocks_tensorflow.row_blocked_values(loss, labels, embeddings, reference)
    batch = reference.is_batch
    keys = embeddings if batch else reference.embeddings
    if not reference.trainable:
        keys = keras.ops.stop_gradient(keys)
    n, m = embeddings.shape[0], keys.shape[0]
    size = max(1, min(limits.BLOCK_ENTRIES // m, (n + limits.MIN_BLOCKS - 1) // limits.MIN_BLOCKS))
    values = []
    for start in range(0, n, size):
        stop = min(start + size, n)
        sources = [embeddings] if batch else [embeddings, keys]

        def matrix_fn(queries, *other, start=start, stop=stop):
            return ops.pairwise(queries[start:stop], other[0] if other else queries,
                                loss.metric)

        matrix = gradients.differentiable_matrix(matrix_fn, sources)
        pairs = _block_pairs(loss, labels, reference, start, stop, matrix.matrix)
        values.append(weighted_pair_loss(
            matrix, lambda block, pairs=pairs: loss.compute_terms(block, pairs)[:2]))
    return keras.ops.concatenate(values, axis=0)


def _block_pairs(loss, labels, reference, start, stop, matrix):
    """The `Pairs` of query rows start:stop against the whole key set."""
    query_labels = labels[start:stop]
    if not reference.is_batch:  # a whole key set: the engine's own masks for these queries
        return loss.pairs(query_labels, reference, matrix)
    # label equality, without the block's own columns start, start + 1, ...
    positive, negative = ops.label_masks(query_labels, labels, exclude_self=False)
    own = keras.ops.one_hot(keras.ops.arange(start, stop), keras.ops.shape(matrix)[1],
                            dtype="bool")
    positive = keras.ops.logical_and(positive, keras.ops.logical_not(own))
    return loss.mined(query_labels, labels, positive, negative, matrix)
