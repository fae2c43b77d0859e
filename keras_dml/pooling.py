"""Max pooling over non-overlapping tiles as a reshape and a max, for JAX's CPU step.

XLA:CPU differentiates `keras.layers.MaxPooling2D` with a select-and-scatter op that
is slow on a CPU: in the main job's network (cnn3, width 32, batch 128) the pooling
gradients took about half of JAX's training step (a jitted value and gradient of the
network: 251 ms with Keras' pooling, 134 ms with this layer, 2026-11-28, 2 busy
cores). Where the tiles do not overlap (strides equal to the pool size, "valid"
padding, channels last), the same maximum is a reshape of the input into tiles and a
max over each tile, whose gradient (`keras_dml.backend.layers_jax.max_over_tiles`) is
elementwise. On PyTorch, "valid" pooling of channels-last inputs runs PyTorch's own
kernel on a channels-first view, without the copies Keras' path makes
(`keras_dml.backend.layers_torch`). TensorFlow has fast pooling of its own and takes
Keras' path.
"""

import keras

from keras_dml import backend


@keras.saving.register_keras_serializable(package="keras_dml")
class TiledMaxPooling2D(keras.layers.MaxPooling2D):
    """`keras.layers.MaxPooling2D` computed on JAX as a max over reshaped tiles.

    The same layer: the same arguments and outputs. On JAX, with strides equal to the
    pool size, "valid" padding and channels-last inputs, the input is cropped to whole
    tiles, reshaped to (batch, rows, pool, columns, pool, channels) and reduced by
    max. The gradient then goes to the maximum of each tile as Keras' does, to the
    first in row-major order where a tile holds several equal maxima. On PyTorch,
    with "valid" padding and channels-last inputs, PyTorch's pooling runs on a view of
    the inputs (no copy). Every other case, and TensorFlow, takes Keras' path.

    Examples:

    >>> pool = keras_dml.pooling.TiledMaxPooling2D()
    >>> keras.ops.convert_to_numpy(pool(np.arange(16.0).reshape(1, 4, 4, 1)))[0, :, :, 0]
    array([[ 5.,  7.],
           [13., 15.]], dtype=float32)
    """

    def _tiled(self, inputs):
        return (backend.name() == "jax" and tuple(self.strides) == tuple(self.pool_size)
                and self.padding == "valid" and self.data_format == "channels_last"
                and None not in inputs.shape[1:])

    def _channels_last_view(self):
        return (backend.name() == "torch" and self.padding == "valid"
                and self.data_format == "channels_last")

    def call(self, inputs):
        if self._channels_last_view():
            from keras_dml.backend import layers_torch

            return layers_torch.max_pool_channels_last(inputs, self.pool_size, self.strides)
        if not self._tiled(inputs):
            return super().call(inputs)
        rows, columns = self.pool_size
        height, width, channels = inputs.shape[1:]
        height, width = height // rows, width // columns
        from keras_dml.backend import layers_jax

        return layers_jax.max_over_tiles(inputs[:, :height * rows, :width * columns],
                                         rows, columns)
