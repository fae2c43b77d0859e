"""`DropPath`: stochastic depth, a residual branch dropped per sample while training."""

import keras

__all__ = ["DropPath"]


@keras.saving.register_keras_serializable(package="keras_dml")
class DropPath(keras.layers.Layer):
    """Stochastic depth of a residual branch (Huang et al., "Deep Networks with
    Stochastic Depth", 2016), as ViT fine-tuning recipes use it ("drop path").

    While training, each sample's branch output is zeroed with probability `rate`,
    and the kept ones are scaled by `1 / (1 - rate)`, so that its expectation is
    unchanged. At inference it is the identity. The random draws come from a
    `keras.random.SeedGenerator`, so the layer runs inside a compiled JAX step too.

    Args:
        rate: Probability of dropping a sample's branch, in [0, 1).
        seed: Seed of the draws. Defaults to None.
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"DropPath: rate must be in [0, 1), got {rate!r}.")
        self.rate = float(rate)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=None):
        if not training or self.rate == 0.0:
            return inputs
        keep = 1.0 - self.rate
        shape = (keras.ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        draws = keras.random.uniform(shape, dtype=inputs.dtype, seed=self.seed_generator)
        kept = keras.ops.floor(draws + keep)  # 1 with probability keep, else 0
        return inputs * keras.ops.cast(kept / keep, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "seed": self.seed}
