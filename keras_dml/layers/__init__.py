"""Keras layers for deep metric learning, one module per family.

`embedding` (the heads: `EmbeddingHead`, `MultiLevelEmbedding`, `L2Normalize`),
`pooling` (`GeneralizedMeanPooling`, `TiledMaxPooling2D`), `batch_norm`
(`FusedBatchNormalization`, `freeze_batch_norm`), `convolution` (`ShiftedConv2D`),
`tokens` (`TokenPooling`, a transformer's tokens to one vector), `stochastic_depth`
(`DropPath`, a transformer block's residual branch dropped per sample),
`preprocessing` (`BackbonePreprocessing`), `proxies` (`Proxies`, the proxy losses'
weights), `momentum` (`MomentumEncoder`, a MoCo key encoder) and `regularizers`
(`LpNorm`). Every layer is registered with Keras as `keras_dml>ClassName`, so `.keras`
files find it whichever module defines it.
"""

from keras_dml.layers.batch_norm import FusedBatchNormalization, freeze_batch_norm
from keras_dml.layers.convolution import ShiftedConv2D
from keras_dml.layers.embedding import EmbeddingHead, L2Normalize, MultiLevelEmbedding
from keras_dml.layers.momentum import MomentumEncoder
from keras_dml.layers.pooling import GeneralizedMeanPooling, TiledMaxPooling2D
from keras_dml.layers.preprocessing import BackbonePreprocessing
from keras_dml.layers.proxies import Proxies, kaiming_normal
from keras_dml.layers.regularizers import LpNorm
from keras_dml.layers.stochastic_depth import DropPath
from keras_dml.layers.tokens import TokenPooling

__all__ = [
    "BackbonePreprocessing",
    "DropPath",
    "EmbeddingHead",
    "FusedBatchNormalization",
    "GeneralizedMeanPooling",
    "L2Normalize",
    "LpNorm",
    "MomentumEncoder",
    "MultiLevelEmbedding",
    "Proxies",
    "ShiftedConv2D",
    "TiledMaxPooling2D",
    "TokenPooling",
    "freeze_batch_norm",
    "kaiming_normal",
]
