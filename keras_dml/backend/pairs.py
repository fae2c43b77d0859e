"""Row-wise primitives of the miners and pair losses, written once per backend.

`keras.ops` has each of them, but on TensorFlow some add work to the graph (`take_along_axis`
broadcasts its indices and rewrites negative ones, `argmax` rewrites -0.0 first: a few
elementwise passes over an (N, M) matrix each; `matmul` of a transpose copies it) or lack
the batched form (`searchsorted` is 1-D only, `argsort` is not stable, there is no
`set_diag`). Here TensorFlow keeps the single
op it ran before, and JAX and PyTorch use `keras.ops` or their own batched op.
"""

import keras

from keras_dml.backend import is_tensorflow, name


def _tf():
    import tensorflow as tf  # only reached on the TensorFlow backend

    return tf


def take_along_rows(x, columns):
    """x[a, columns[a, k]] for a 2-D `x` and int `columns` (N, K): shape (N, K).

    (`keras_dml.backend.primitives.row_entries` takes one column per row.)
    """
    if is_tensorflow():
        return _tf().gather(x, columns, batch_dims=1)
    return keras.ops.take_along_axis(x, columns, axis=1)


def argmax_rows(x):
    """int32 (N,): the column of each row's largest entry (the first of ties)."""
    if is_tensorflow():
        return _tf().argmax(x, axis=1, output_type="int32")
    return keras.ops.cast(keras.ops.argmax(x, axis=1), "int32")


def argmin_rows(x):
    """int32 (N,): the column of each row's smallest entry (the first of ties)."""
    if is_tensorflow():
        return _tf().argmin(x, axis=1, output_type="int32")
    return keras.ops.cast(keras.ops.argmin(x, axis=1), "int32")


def argsort_rows(x):
    """int32 (N, M): each row's stable ascending order (ties keep their column order)."""
    if is_tensorflow():
        return _tf().argsort(x, axis=1, stable=True)
    if name() == "jax":
        import jax.numpy as jnp

        return jnp.argsort(x, axis=1, stable=True).astype("int32")
    import torch

    return torch.argsort(x, dim=1, stable=True).to(torch.int32)


def searchsorted_rows(sorted_rows, values, side="left"):
    """int32 (N, K): per row a, where values[a] would go in the sorted row sorted_rows[a]."""
    if is_tensorflow():
        return _tf().searchsorted(sorted_rows, values, side=side, out_type="int32")
    if name() == "jax":
        import jax

        search = jax.vmap(lambda row, keys: jax.numpy.searchsorted(row, keys, side=side))
        return search(sorted_rows, values).astype("int32")
    import torch

    return torch.searchsorted(sorted_rows.contiguous(), values.contiguous(), side=side,
                              out_int32=True)


def set_diagonal(x, diagonal):
    """`x` (N, N) with its diagonal replaced by `diagonal` (N,)."""
    if is_tensorflow():
        return _tf().linalg.set_diag(x, diagonal)
    size = keras.ops.shape(x)[0]
    on_diagonal = keras.ops.eye(size, dtype="bool")
    return keras.ops.where(on_diagonal, keras.ops.expand_dims(diagonal, 0), x)
