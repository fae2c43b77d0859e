"""A loop over each query's positives, one (N, M) step per positive slot: how losses
whose terms pair every positive with every negative (PNP, DynamicSoftMargin) stay
at |P| N work per query without an (N, P, M) tensor."""

import keras

__all__ = ["over_positive_slots"]


def over_positive_slots(positive, step, carry):
    """`carry` after `step(one_hot, active, *carry) -> carry` for j = 1 .. max |P|.

    Args:
        positive: bool (N, M) positive mask.
        step: called once per slot j with `one_hot`, float32 (N, M) marking each
            query's j-th positive (in column order; an all-zero row when it has
            fewer), and `active`, float32 (N,) 1 where the query has a j-th positive.
        carry: tuple of tensors, the loop's state (shapes kept by `step`).

    Returns:
        The final `carry` (a tuple). Runs as a `while_loop` (graph, XLA, jit).
    """
    in_positive = keras.ops.cast(positive, "float32")
    counts = keras.ops.sum(in_positive, axis=1)
    order = keras.ops.cumsum(in_positive, axis=1) * in_positive  # the j-th positive has j
    slots = keras.ops.cast(keras.ops.max(counts, initial=0.0), "int32")

    def body(j, *state):
        at = keras.ops.cast(j, "float32")
        one_hot = keras.ops.cast(keras.ops.equal(order, at), "float32")
        active = keras.ops.cast(counts >= at, "float32")
        return (j + 1, *step(one_hot, active, *state))

    start = keras.ops.convert_to_tensor(1, "int32")
    return tuple(keras.ops.while_loop(lambda j, *_: j <= slots, body, (start, *carry))[1:])
