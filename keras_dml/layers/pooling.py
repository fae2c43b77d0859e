"""Pooling layers: generalised-mean (GeM) global pooling, and max pooling over
non-overlapping tiles as a reshape and a max.

XLA:CPU differentiates `keras.layers.MaxPooling2D` with a select-and-scatter op that
is slow on a CPU. Where the tiles do not overlap (strides equal to the pool size,
"valid" padding, channels last), the same maximum is a reshape of the input into tiles
and a max over each tile, whose gradient (`keras_dml.backend.jax.layers.max_over_tiles`)
is elementwise (in training: in inference Keras' own pooling is the faster forward).
On PyTorch, "valid" pooling of channels-last inputs runs PyTorch's own
kernel on a channels-first view, without the copies Keras' path makes
(`keras_dml.backend.torch.layers`). TensorFlow has fast pooling of its own and takes
Keras' path.
"""

import keras

from keras_dml import backend, hyperparameters

__all__ = ["GeneralizedMeanPooling", "TiledMaxPooling2D"]


@keras.saving.register_keras_serializable(package="keras_dml")
class GeneralizedMeanPooling(keras.layers.Layer):
    """Generalised-mean (GeM) global pooling with a learnable exponent p, in float32.

        f_k = ( 1/|X_k| sum_{x in X_k} max(x, eps)^p )^(1/p)

    over the spatial positions X_k of channel k (Radenovic, Tolias, Chum, TPAMI
    2018, eq. 3): p = 1 is average pooling, p -> inf max pooling. p is one
    trainable scalar shared by all channels (the paper's choice), initialised to 3
    and held at >= 1 in the forward pass. Input (batch, ..., channels) of rank >= 3,
    output (batch, channels).

    Args:
        p: initial exponent. Defaults to 3.0.
        trainable_p: learn p. Defaults to True.
        epsilon: the clamp of the activations. Defaults to 1e-6.
    """

    def __init__(self, p=3.0, trainable_p=True, epsilon=1e-6, **kwargs):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        self.initial_p = hyperparameters.positive("p", p)
        if self.initial_p < 1.0:
            raise ValueError(f"p must be >= 1, got {p!r}.")
        self.trainable_p = bool(trainable_p)
        self.epsilon = hyperparameters.positive("epsilon", epsilon)

    def build(self, input_shape):
        if len(input_shape) < 3:
            raise ValueError("GeneralizedMeanPooling needs inputs (batch, ..., channels) of "
                             f"rank >= 3, got shape {tuple(input_shape)}.")
        self.p = self.add_weight(name="p", shape=(),
                                 initializer=keras.initializers.Constant(self.initial_p),
                                 trainable=self.trainable_p)

    def call(self, inputs):
        p = keras.ops.maximum(keras.ops.cast(self.p, "float32"), 1.0)
        x = keras.ops.maximum(keras.ops.cast(inputs, "float32"), self.epsilon)
        axes = tuple(range(1, len(inputs.shape) - 1))
        return keras.ops.power(keras.ops.mean(keras.ops.power(x, p), axis=axes), 1.0 / p)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "p": self.initial_p, "trainable_p": self.trainable_p,
                "epsilon": self.epsilon}


@keras.saving.register_keras_serializable(package="keras_dml")
class TiledMaxPooling2D(keras.layers.MaxPooling2D):
    """`keras.layers.MaxPooling2D` computed on JAX as a max over reshaped tiles.

    The same layer: the same arguments and outputs. On JAX in training, with strides
    equal to the pool size, "valid" padding and channels-last inputs, the input is
    cropped to whole tiles, reshaped to (batch, rows, pool, columns, pool, channels)
    and reduced by max. The gradient then goes to the maximum of each tile as Keras'
    does, to the first in row-major order where a tile holds several equal maxima.
    In inference (`training` not True) JAX takes Keras' pooling, whose forward pass
    XLA:CPU runs faster than the tiles'. On PyTorch,
    with "valid" padding and channels-last inputs, PyTorch's pooling runs on a view of
    the inputs (no copy). Every other case, and TensorFlow, takes Keras' path.

    Examples:

    >>> pool = keras_dml.layers.TiledMaxPooling2D()
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

    def call(self, inputs, training=None):
        if self._channels_last_view():
            from keras_dml.backend.torch import layers as torch_layers

            return torch_layers.max_pool_channels_last(inputs, self.pool_size, self.strides)
        if not (training and self._tiled(inputs)):
            return super().call(inputs)
        rows, columns = self.pool_size
        height, width, channels = inputs.shape[1:]
        height, width = height // rows, width // columns
        from keras_dml.backend.jax import layers as jax_layers

        return jax_layers.max_over_tiles(inputs[:, :height * rows, :width * columns],
                                         rows, columns)
