"""Tensor primitives of the engine and `keras_dml.ops` whose best form differs by backend.

Each is one `keras.ops` expression (or the backend's own op) on JAX and PyTorch and
the TensorFlow op the package used before it ran on every backend, so TensorFlow's
graphs, and speed, stay what they were: scatters (`keras.ops.scatter` is a Python
loop on PyTorch), run-time assertions, shapes, XLA. The row-wise primitives (gathers,
matmuls with transposes, stable sorts) are in `keras_dml.backend.pairs`, the control
dependencies and value checks in `keras_dml.backend.tensors`.
"""

import numpy as np

import keras

from keras_dml import backend


def _tf():
    import tensorflow as tf  # only ever reached on the TensorFlow backend

    return tf


def scatter_rows(indices, rows, num_rows):
    """A dense (num_rows, d) tensor holding `rows` (K, d) at `indices` (K,), zeros
    elsewhere; repeated indices add up."""
    name = backend.name()
    if name == "tensorflow":
        tf = _tf()
        return tf.scatter_nd(indices[:, tf.newaxis], rows,
                             tf.stack([num_rows, tf.shape(rows)[1]]))
    if name == "torch":
        import torch

        zeros = torch.zeros((num_rows, rows.shape[1]), dtype=rows.dtype, device=rows.device)
        return zeros.index_add(0, keras.ops.convert_to_tensor(indices).long(), rows)
    return keras.ops.segment_sum(rows, indices, num_segments=num_rows)


def subtract_at(x, columns, amount):
    """`x` (N, C) with `amount` subtracted from x[i, columns[i]] in each row."""
    if backend.is_tensorflow():
        tf = _tf()
        own = tf.stack([tf.range(tf.shape(columns)[0]), columns], axis=1)
        return tf.tensor_scatter_nd_sub(x, own, tf.fill(tf.shape(columns),
                                                         tf.cast(amount, x.dtype)))
    return x - amount * keras.ops.one_hot(columns, keras.ops.shape(x)[1], dtype=x.dtype)


def first_pairs(labels):
    """TensorFlow: the first two samples of every class that has two, exactly C pairs
    (a data-dependent shape), classes in order of first appearance: (anchors,
    positives, valid) as `keras_dml.ops.first_pair_per_class`."""
    tf = _tf()
    n = tf.shape(labels)[0]
    distinct, class_of = tf.unique(labels, out_idx=tf.int32)
    classes = tf.shape(distinct)[0]
    position = tf.range(n)
    first = tf.math.unsorted_segment_min(position, class_of, classes)
    is_first = tf.equal(position, tf.gather(first, class_of))
    second = tf.math.unsorted_segment_min(tf.where(is_first, n, position), class_of, classes)
    with_pair = tf.where(second < n)[:, 0]  # n: the class has no second sample
    anchors, positives = tf.gather(first, with_pair), tf.gather(second, with_pair)
    return anchors, positives, tf.ones_like(anchors, dtype=tf.bool)


def num_elements(x):
    """The number of entries of `x`: an int for a static shape, else an int64 tensor."""
    shape = tuple(x.shape)
    if all(dim is not None for dim in shape):
        return int(np.prod(shape, dtype=np.int64))
    return _tf().size(x, out_type=_tf().int64)  # dynamic shapes: TensorFlow graphs only


def num_rows(x):
    """The length of the first axis of `x`: an int when static, else an int64 tensor."""
    if x.shape[0] is not None:
        return int(x.shape[0])
    tf = _tf()  # dynamic shapes: TensorFlow graphs only
    return tf.cast(tf.shape(x)[0], tf.int64)


def in_xla_context():
    """True while TensorFlow traces a function compiled with `jit_compile=True`.

    XLA computes dynamically shaped tensors at their upper bound, and slowly; code
    that can shrink a tensor to a data-dependent size asks this first. False on JAX
    and PyTorch (see `static_shapes`).
    """
    if not backend.is_tensorflow():
        return False
    tf = _tf()
    try:
        from tensorflow.python.ops import control_flow_util
    except ImportError:  # pragma: no cover - private module moved: assume XLA
        return True
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def static_shapes():
    """True where tensor shapes must not depend on values: JAX (every step is jitted)
    and TensorFlow code under XLA."""
    return backend.name() == "jax" or in_xla_context()


def xla_compiled(function):
    """`function` as one XLA cluster on TensorFlow (`tf.function(jit_compile=True)`);
    None on JAX (the whole train step is jitted already) and PyTorch."""
    if not backend.is_tensorflow():
        return None
    return _tf().function(function, jit_compile=True, reduce_retracing=True)


def assert_that(x, condition, message, data=(), summarize=8):
    """`x`, after a run-time check that `condition()`, a boolean scalar, holds.

    For a TensorFlow graph (eager code checks values with `concrete`): an
    InvalidArgumentError naming `message` and `data` at run time. JAX (jitted) and
    PyTorch have no run-time assertion in a traced graph: `x` unchanged.
    """
    if not backend.is_tensorflow():
        return x
    tf = _tf()
    with tf.control_dependencies([tf.debugging.Assert(condition(), [message, *data],
                                                      summarize=summarize)]):
        return tf.identity(x)
