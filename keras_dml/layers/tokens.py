"""`TokenPooling`: one vector per image from a vision transformer's token sequence."""

import keras

from keras_dml.layers.pooling import GeneralizedMeanPooling

__all__ = ["TOKEN_POOLINGS", "TokenPooling"]

#: How `TokenPooling` makes one vector of a token sequence.
TOKEN_POOLINGS = ("cls", "mean", "gem")


@keras.saving.register_keras_serializable(package="keras_dml")
class TokenPooling(keras.layers.Layer):
    """Pools a transformer's tokens `(batch, tokens, dim)` into `(batch, dim)`.

    The sequence starts with `prefix_tokens` tokens that are not image patches
    (the class token, then any register tokens); the rest are the patch tokens.

    - `"cls"`: the class token (the first token), as DINO and ViT retrieval use it.
    - `"mean"`: the mean of the patch tokens.
    - `"gem"`: generalised-mean pooling of the patch tokens (`GeneralizedMeanPooling`:
      `(mean of max(x, eps)^p)^(1/p)` per feature, p learnable from 3), computed
      in float32.

    Args:
        pooling: One of `TOKEN_POOLINGS`.
        prefix_tokens: Tokens before the patch tokens (>= 1 for "cls").
    """

    def __init__(self, pooling="cls", prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        if pooling not in TOKEN_POOLINGS:
            raise ValueError(f"pooling must be one of {TOKEN_POOLINGS}, got {pooling!r}.")
        if not isinstance(prefix_tokens, int) or prefix_tokens < 0:
            raise ValueError(f"prefix_tokens must be an int >= 0, got {prefix_tokens!r}.")
        if pooling == "cls" and prefix_tokens < 1:
            raise ValueError("pooling='cls' needs a class token, and this network's tokens "
                             "are all patches (prefix_tokens=0): use 'mean' or 'gem'.")
        self.pooling = pooling
        self.prefix_tokens = prefix_tokens
        self.gem = GeneralizedMeanPooling(name="gem") if pooling == "gem" else None

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError("TokenPooling needs tokens (batch, tokens, dim), got shape "
                             f"{tuple(input_shape)}.")
        if input_shape[1] is not None and input_shape[1] <= self.prefix_tokens:
            raise ValueError(f"TokenPooling: {input_shape[1]} tokens leave no patch token "
                             f"after the first {self.prefix_tokens}.")
        if self.gem is not None:
            self.gem.build((input_shape[0], None, input_shape[2]))

    def call(self, tokens):
        if self.pooling == "cls":
            return tokens[:, 0, :]
        patches = tokens[:, self.prefix_tokens:, :]
        if self.pooling == "mean":
            return keras.ops.mean(patches, axis=1)
        return keras.ops.cast(self.gem(patches), tokens.dtype)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[2])

    def get_config(self):
        return {**super().get_config(), "pooling": self.pooling,
                "prefix_tokens": self.prefix_tokens}
