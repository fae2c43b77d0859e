"""Miners: classes whose call maps (similarity, positive mask, negative mask) to kept-pair masks."""

from keras_dml.mining.base import Miner, MultiSimilarityMiner, get, serialize
from keras_dml.mining.triplet import EasyMiner
from keras_dml.mining.triplet import HardMiner
from keras_dml.mining.triplet import PairMarginMiner
from keras_dml.mining.triplet import SemiHardMiner
from keras_dml.mining.triplet import TripletMiner
from keras_dml.mining.distance_weighted import DistanceWeighted

__all__ = [
    "DistanceWeighted",
    "EasyMiner",
    "HardMiner",
    "Miner",
    "MultiSimilarityMiner",
    "PairMarginMiner",
    "SemiHardMiner",
    "TripletMiner",
    "get",
    "serialize",
]
