"""Deep metric learning losses, each a `keras.losses.Loss` on the pair-weighting engine."""

from keras_dml.losses.base import PairLoss, PairTerms
from keras_dml.losses.contrastive import Contrastive
from keras_dml.losses.ice import InstanceCrossEntropy
from keras_dml.losses.multi_similarity import MultiSimilarity
