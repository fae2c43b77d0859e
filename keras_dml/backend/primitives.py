"""Tensor primitives whose best form differs by Keras backend: the one home of them.

Each is the TensorFlow op the package used before it ran on every backend (so
TensorFlow's graphs, and speed, stay what they were) and one `keras.ops` expression
or the backend's own op on JAX and PyTorch. Why not plain `keras.ops` everywhere: on
TensorFlow some add passes over an (N, M) matrix (`take_along_axis` broadcasts its
indices and rewrites negative ones, `argmax` rewrites -0.0 first, `matmul` of a
transpose copies it), some lack the batched form (`searchsorted` is 1-D only, `argsort`
is not stable, there is no `set_diag`), and `keras.ops.scatter` is a Python loop on
PyTorch. Also here: variable reads, graph order (control dependencies), run-time
checks, shapes and XLA, which differ by backend too.
"""

import contextlib

import keras
import numpy as np

from keras_dml import backend

__all__ = [
    "argmax_rows",
    "argmin_rows",
    "argsort_rows",
    "as_tensor",
    "assert_equal",
    "assert_that",
    "bitcast",
    "control_dependencies",
    "first_pairs",
    "gather",
    "in_xla_context",
    "is_concrete",
    "matmul",
    "num_elements",
    "num_rows",
    "scatter_rows",
    "searchsorted_rows",
    "set_diagonal",
    "static_shapes",
    "subtract_at",
    "take_along_rows",
    "taps",
    "without_diagonal",
    "xla_compiled",
]


def _tf():
    import tensorflow as tf  # only ever reached on the TensorFlow backend

    return tf


def as_tensor(x):
    """`x` (an array, a tensor, or a variable, read) as a tensor of the backend:
    `tf.convert_to_tensor` on TensorFlow, which keeps a Keras variable otherwise."""
    if backend.is_tensorflow():
        return _tf().convert_to_tensor(x)
    return keras.ops.convert_to_tensor(x.value if isinstance(x, keras.Variable) else x)


def control_dependencies(tensors):
    """A context in which TensorFlow's graph runs `tensors` first (frees their inputs
    before the next temporaries exist); no effect on eager backends."""
    if backend.is_tensorflow():
        return _tf().control_dependencies(tensors)
    return contextlib.nullcontext()


def is_concrete(x):
    """True when `x` has a value now (eager), False for a symbolic tensor (a
    `tf.function` graph, a JAX trace)."""
    try:
        keras.ops.convert_to_numpy(x)
    except Exception:  # noqa: BLE001 (graph tensors and tracers raise various errors)
        return False
    return True


def assert_equal(x, expected, message, values):
    """(`x`, `values`) after checking that `x` equals the NumPy array `expected`.

    Concrete `x`: a ValueError with `message` now. In a TensorFlow graph: an
    assertion that fails when the graph runs. Under a JAX trace, which cannot raise
    at run time: `values` (the float result that depends on `x`) become NaN where
    `x` differs, never a silent wrong answer.
    """
    if is_concrete(x):
        value = keras.ops.convert_to_numpy(x)
        if not np.array_equal(value, expected):
            raise ValueError(f"{message}; got {value.reshape(-1)[:8].tolist()}...")
        return x, values
    if backend.is_tensorflow():
        tf = _tf()
        with tf.control_dependencies([tf.debugging.assert_equal(x, expected, message=message)]):
            return tf.identity(x), values
    equal = keras.ops.all(keras.ops.equal(x, keras.ops.convert_to_tensor(expected, x.dtype)))
    return x, keras.ops.where(equal, values, np.float32("nan"))


def taps(inputs, rows, columns, padding):
    """The `rows` x `columns` shifted views of `inputs` (N, H, W, C), row-major, each the
    output's spatial size (stride 1, "same" padded as Keras pads: the odd pixel after)."""
    if padding == "same":
        inputs = keras.ops.pad(inputs, [[0, 0], [(rows - 1) // 2, rows // 2],
                                        [(columns - 1) // 2, columns // 2], [0, 0]])
    height, width = inputs.shape[1] - rows + 1, inputs.shape[2] - columns + 1
    return [inputs[:, row:row + height, column:column + width]
            for row in range(rows) for column in range(columns)]


def take_along_rows(x, columns):
    """x[a, columns[a]] for a 2-D `x`: int `columns` (N, K) give (N, K); (N,) give (N,)."""
    if backend.is_tensorflow():
        return _tf().gather(x, columns, batch_dims=1)
    if len(columns.shape) == 1:
        return keras.ops.take_along_axis(x, keras.ops.expand_dims(columns, 1), axis=1)[:, 0]
    return keras.ops.take_along_axis(x, columns, axis=1)


def gather(x, index, axis=0):
    """x[index] along `axis`, for indices known to lie in [0, x.shape[axis])."""
    if backend.is_tensorflow():
        return _tf().gather(x, index, axis=axis)
    return keras.ops.take(x, index, axis=axis)


def matmul(a, b, transpose_a=False, transpose_b=False):
    """a @ b with either side transposed, without a transposed copy on TensorFlow."""
    if backend.is_tensorflow():
        return _tf().matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)
    a = keras.ops.transpose(a) if transpose_a else a
    return keras.ops.matmul(a, keras.ops.transpose(b) if transpose_b else b)


def argmax_rows(x):
    """int32 (N,): the column of each row's largest entry (the first of ties)."""
    if backend.is_tensorflow():
        return _tf().argmax(x, axis=1, output_type="int32")
    return keras.ops.cast(keras.ops.argmax(x, axis=1), "int32")


def argmin_rows(x):
    """int32 (N,): the column of each row's smallest entry (the first of ties)."""
    if backend.is_tensorflow():
        return _tf().argmin(x, axis=1, output_type="int32")
    return keras.ops.cast(keras.ops.argmin(x, axis=1), "int32")


def argsort_rows(x):
    """int32 (N, M): each row's stable ascending order (ties keep their column order)."""
    if backend.is_tensorflow():
        return _tf().argsort(x, axis=1, stable=True)
    if backend.name() == "jax":
        import jax.numpy as jnp

        return jnp.argsort(x, axis=1, stable=True).astype("int32")
    import torch

    return torch.argsort(x, dim=1, stable=True).to(torch.int32)


def searchsorted_rows(sorted_rows, values, side="left"):
    """int32 (N, K): per row a, where values[a] would go in the sorted row sorted_rows[a]."""
    if backend.is_tensorflow():
        return _tf().searchsorted(sorted_rows, values, side=side, out_type="int32")
    if backend.name() == "jax":
        import jax

        search = jax.vmap(lambda row, keys: jax.numpy.searchsorted(row, keys, side=side))
        return search(sorted_rows, values).astype("int32")
    import torch

    return torch.searchsorted(sorted_rows.contiguous(), values.contiguous(), side=side,
                              out_int32=True)


def set_diagonal(x, diagonal):
    """`x` (N, N) with its diagonal replaced by `diagonal` (N,)."""
    if backend.is_tensorflow():
        return _tf().linalg.set_diag(x, diagonal)
    size = keras.ops.shape(x)[0]
    on_diagonal = keras.ops.eye(size, dtype="bool")
    return keras.ops.where(on_diagonal, keras.ops.expand_dims(diagonal, 0), x)


def without_diagonal(mask):
    """A square boolean `mask` with its diagonal set to False."""
    if backend.is_tensorflow():
        tf = _tf()  # one pass over the diagonal, not an N x N eye and a logical_and
        return tf.linalg.set_diag(mask, tf.zeros_like(tf.linalg.diag_part(mask)))
    return keras.ops.logical_and(mask, keras.ops.logical_not(
        keras.ops.eye(keras.ops.shape(mask)[0], dtype="bool")))


def bitcast(x, dtype):
    """The bits of `x` read as `dtype` of the same size (float32 <-> int32).

    TensorFlow's `tf.bitcast`: `keras.ops.view` checks the last dimension in Python,
    which fails on a dynamic shape (a `tf.distribute` replica's batch).
    """
    if backend.is_tensorflow():
        return _tf().bitcast(x, _tf().as_dtype(dtype))
    return keras.ops.view(x, dtype)


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
