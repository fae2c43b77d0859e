"""How the pair-weighting engine differentiates through its (N, M) matrix, by backend.

The engine's custom gradient sends `upstream * W` back through the matrix to the
tensors it was built from. On TensorFlow a persistent `tf.GradientTape` records the
matrix from its sources, and the custom gradient (over the sources) replays it: the
backward pass keeps W and the matrix's own inputs (the unit embeddings), never the
matrix or the masks. On JAX and PyTorch the custom gradient is over the matrix itself
and their autodiff carries `upstream * W` on to the sources (under `jit`, XLA frees
the matrix as early as TensorFlow does; PyTorch's autograd.Function keeps it, one
(N, M) float32 more than TensorFlow until the backward pass).
"""

import keras

from keras_dml import backend
from keras_dml.backend import primitives

__all__ = ["differentiable_matrix", "MatrixGradient", "value_and_gradient"]


class MatrixGradient:
    """An (N, M) matrix built from `sources`, and its VJP for the engine's custom gradient.

    Attributes:
        matrix: the matrix (for the masks and mining, outside the custom gradient).
        inputs: the tensors the custom gradient differentiates (before any parameters).
    """

    def __init__(self, matrix, inputs):
        self.matrix, self.inputs = matrix, tuple(inputs)

    def matrix_of(self, inputs):
        """The matrix inside the custom gradient, given its `inputs`."""
        return inputs[0]

    def gradients(self, cotangent):
        """The gradients of `inputs` for the `cotangent` of the matrix (its VJP)."""
        return [cotangent]


class _TapedMatrix(MatrixGradient):
    """TensorFlow: the custom gradient is over the sources; the tape gives the VJP."""

    def __init__(self, matrix, sources, tape):
        super().__init__(matrix, sources)
        self._tape = tape

    def matrix_of(self, inputs):
        return self.matrix

    def gradients(self, cotangent):
        import tensorflow as tf

        through_matrix = self._tape.gradient(
            self.matrix, list(self.inputs), output_gradients=cotangent,
            unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return [tf.convert_to_tensor(g) for g in through_matrix]


def differentiable_matrix(matrix_fn, sources):
    """`matrix_fn(*sources)` as a `MatrixGradient`.

    Args:
        matrix_fn: function of `sources` returning the float32 (N, M) matrix.
        sources: the tensors (or variables, read here) the gradient reaches
            (embeddings, trainable keys).
    """
    sources = tuple(primitives.as_tensor(source) for source in sources)
    if backend.is_tensorflow():
        import tensorflow as tf

        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(sources)
            matrix = matrix_fn(*sources)
        return _TapedMatrix(matrix, sources, tape)
    matrix = matrix_fn(*sources)
    return MatrixGradient(matrix, (matrix,))


def value_and_gradient(function, x):
    """(value, aux, d sum(value) / d x) by plain autodiff, for `function(x) -> (value, aux)`;
    the gradient is zeros where `x` does not reach the value.

    TensorFlow: a `tf.GradientTape`; JAX: `jax.grad`, or forward mode (`jax.jacfwd`, one
    JVP per entry of x) where a loop's trip count depends on values, which JAX's reverse
    mode cannot differentiate; PyTorch: `torch.autograd.grad`.
    """
    name = backend.name()
    if name == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value, aux = function(x)
            total = tf.reduce_sum(value)
        return value, aux, tape.gradient(total, x,
                                         unconnected_gradients=tf.UnconnectedGradients.ZERO)
    if name == "jax":
        import jax

        def summed(x):
            value, aux = function(x)
            return keras.ops.sum(value), (value, aux)

        try:
            gradient, (value, aux) = jax.grad(summed, has_aux=True)(x)
        except ValueError as error:  # a loop whose trip count depends on values
            if "Reverse-mode differentiation does not work" not in str(error):
                raise
            # forward mode differentiates through such loops: one JVP per entry of x
            gradient, (value, aux) = jax.jacfwd(summed, has_aux=True)(x)
        return value, aux, gradient
    if name == "torch":
        import torch

        with torch.enable_grad():
            x = x.detach().requires_grad_(True)
            value, aux = function(x)
            gradient = (torch.autograd.grad(value.sum(), x, allow_unused=True)[0]
                        if value.requires_grad else None)
        if gradient is None:  # x does not reach the value
            gradient = torch.zeros_like(x)
        return value.detach(), aux, gradient
    raise NotImplementedError(f"keras_dml has no autodiff for the {name!r} backend.")
