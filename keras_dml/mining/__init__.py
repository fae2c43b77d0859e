"""Miners: functions from (similarity, positive mask, negative mask) to kept-pair masks."""

from keras_dml.mining.base import Miner, MultiSimilarityMiner, get, serialize
