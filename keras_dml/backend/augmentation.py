"""A random Keras layer applied to NumPy batches off TensorFlow (a `map_fn(x, y, step)` of
`ClassBalancedPyDataset`), as one compiled program where the backend has one."""

import keras
import numpy as np

from keras_dml import backend

__all__ = ["step_seed_states", "training_call"]


def step_seed_states(initial, step):
    """The seed generators' states for batch `step`: each drawn from its initial state
    and the step alone, so batch `step` gets the same draws in any run (a resumed one
    too), as the tf.data stream seeds its augmentation by `(seed, batch)`."""
    states = []
    for state in initial:
        state = np.asarray(state)
        entropy = [int(value) for value in state.reshape(-1)] + [int(step)]
        drawn = np.random.SeedSequence(entropy).generate_state(state.size) % (2**31)
        states.append(drawn.reshape(state.shape).astype(state.dtype))
    return states


def training_call(layer):
    """`layer(x, training=True)` as a function `call(x, step=None)` of a NumPy batch,
    returning NumPy.

    Without `step` the layer's seed state is carried from call to call (draws differ
    from batch to batch, reproducibly from the layer's seed); with `step` (the batch's
    index in its stream) the state is `step_seed_states(initial, step)`, so a resumed
    run draws what an uninterrupted one did. On JAX the call is jitted once per input
    shape: Keras' eager JAX ops dispatch one small program per op, many times slower
    than the one jitted program. Elsewhere the layer is called as it is.
    """
    initial = None

    def seeds_for(step, x):
        nonlocal initial
        if not layer.built:
            layer.build(x.shape)
        if initial is None:
            initial = [keras.ops.convert_to_numpy(v) for v in layer.non_trainable_variables]
        return None if step is None else step_seed_states(initial, step)

    if backend.name() != "jax":
        def call(x, step=None):
            states = seeds_for(step, x)
            for variable, value in zip(layer.non_trainable_variables, states or ()):
                variable.assign(value)
            return keras.ops.convert_to_numpy(layer(x, training=True))

        return call
    import jax

    compiled = jax.jit(lambda state, x: layer.stateless_call([], state, x, training=True))
    state = None

    def call(x, step=None):
        nonlocal state
        states = seeds_for(step, x)
        if states is not None:
            state = states
        elif state is None:
            state = [v.value for v in layer.non_trainable_variables]
        y, state = compiled(state, x)
        return keras.ops.convert_to_numpy(y)

    return call
