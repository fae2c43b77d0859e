"""A random Keras layer (the training augmentation) applied to NumPy batches off TensorFlow,
as one compiled program where the backend has one."""

import keras

from keras_dml import backend

__all__ = ["training_call"]


def training_call(layer):
    """`layer(x, training=True)` as a function of a NumPy batch, returning NumPy.

    On JAX the call is jitted once per input shape, its random-seed state carried from
    call to call (draws differ from batch to batch, reproducibly from the layer's seed):
    Keras' eager JAX ops dispatch one small program per op, many times slower than the
    one jitted program. Elsewhere the layer is called as it is.
    """
    if backend.name() != "jax":
        return lambda x: keras.ops.convert_to_numpy(layer(x, training=True))
    import jax

    compiled = jax.jit(lambda state, x: layer.stateless_call([], state, x, training=True))
    state = None

    def call(x):
        nonlocal state
        if state is None:
            if not layer.built:
                layer.build(x.shape)
            state = [v.value for v in layer.non_trainable_variables]
        y, state = compiled(state, x)
        return keras.ops.convert_to_numpy(y)

    return call
