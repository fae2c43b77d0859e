"""Variable reads, graph order and run-time checks, which differ by Keras backend.

On TensorFlow each function below is what the package did before it was written in
`keras.ops` (so TensorFlow's graphs stay what they were); on JAX and PyTorch it is
the `keras.ops` equivalent, or nothing where eager order already holds.
"""

import contextlib

import keras
import numpy as np

from keras_dml import backend


def read_variable(variable):
    """The current value of a Keras variable as a tensor the gradient flows through.

    `keras.ops.convert_to_tensor` returns a TensorFlow variable unchanged (Keras
    variables count as tensors there); this reads it (`tf.convert_to_tensor`). On JAX
    it is the value in the current stateless scope, on PyTorch the parameter itself.
    """
    if backend.is_tensorflow():
        import tensorflow as tf

        return tf.convert_to_tensor(variable)
    return keras.ops.convert_to_tensor(variable)


def control_dependencies(tensors):
    """A context in which TensorFlow's graph runs `tensors` first (frees their inputs
    before the next temporaries exist); no effect on eager backends."""
    if backend.is_tensorflow():
        import tensorflow as tf

        return tf.control_dependencies(tensors)
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
        import tensorflow as tf

        with tf.control_dependencies([tf.debugging.assert_equal(x, expected, message=message)]):
            return tf.identity(x), values
    equal = keras.ops.all(keras.ops.equal(x, keras.ops.convert_to_tensor(expected, x.dtype)))
    return x, keras.ops.where(equal, values, np.float32("nan"))
