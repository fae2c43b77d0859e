"""TensorFlow's row blocks: `tf.TensorArray`s of blocks of query rows and the
backward pass's matmuls over them.

`keras_dml.losses.row_blocks_tensorflow` (the TensorFlow form of
`keras_dml.losses.row_blocks`) keeps each block's weights in a `block_array`, never
concatenated into a second (N, M) copy; `keras_dml.ops.similarity_gradients` reads
them back through `blocked_products`.
"""

import tensorflow as tf

__all__ = ["block_array", "blocked_products"]


def block_array(count):
    """An empty `tf.TensorArray` of `count` float32 blocks of any shape."""
    return tf.TensorArray(tf.float32, size=count, infer_shape=False)

def blocked_products(blocks, block_rows, query, key, row_scale, key_gradient):
    """`(W @ key) * row_scale` and `W^T @ (query * row_scale)` from W's row blocks."""

    def step(i, to_query, to_key):
        start = i * block_rows
        block = blocks.read(i)
        scale = row_scale[start:start + block_rows]
        to_query = to_query.write(i, tf.matmul(block, key) * scale)
        if key_gradient:
            to_key += tf.reshape(tf.matmul(block, query[start:start + block_rows] * scale,
                                           transpose_a=True), tf.shape(to_key))
        return i + 1, to_query, to_key

    _, to_query, to_key = tf.while_loop(
        lambda i, *_: i < blocks.size(), step,
        (tf.constant(0), tf.TensorArray(query.dtype, size=blocks.size(), infer_shape=False),
         tf.zeros_like(key)), parallel_iterations=1)
    return tf.reshape(to_query.concat(), tf.shape(query)), to_key


