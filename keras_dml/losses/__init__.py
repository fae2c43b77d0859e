"""Deep metric learning losses, each a `keras.losses.Loss` on the pair-weighting engine."""

from keras_dml.losses.additive_margin import ArcFace, CosFace, SubCenterArcFace
from keras_dml.losses.angular import Angular
from keras_dml.losses.balanced_contrastive import BalancedContrastive
from keras_dml.losses.base import PairLoss, Pairs, PairTerms, Reference
from keras_dml.losses.binomial import BinLifted, BinomialDeviance
from keras_dml.losses.circle import Circle
from keras_dml.losses.combined import Combined
from keras_dml.losses.contrastive import Contrastive
from keras_dml.losses.cross_batch_memory import CrossBatchMemory, MemoryBank
from keras_dml.losses.dynamic_soft_margin import DynamicSoftMargin
from keras_dml.losses.fast_ap import FastAP
from keras_dml.losses.histogram import Histogram
from keras_dml.losses.ice import InstanceCrossEntropy
from keras_dml.losses.instance import Instance
from keras_dml.losses.intra_pair_variance import IntraPairVariance
from keras_dml.losses.lifted import GeneralizedLiftedStructure, LiftedStructure
from keras_dml.losses.log_ratio import LogRatio
from keras_dml.losses.manifold import Manifold
from keras_dml.losses.margin import Margin
from keras_dml.losses.multiple_negatives import MultipleNegativesRanking
from keras_dml.losses.multiplicative_margin import LargeMarginSoftmax, SphereFace
from keras_dml.losses.multi_similarity import MultiSimilarity, RelativeAbsoluteWeighting
from keras_dml.losses.nca import NCA
from keras_dml.losses.normalized_softmax import NormalizedSoftmax
from keras_dml.losses.npair import NPair
from keras_dml.losses.p2sgrad import P2SGrad
from keras_dml.losses.pnp import PNP
from keras_dml.losses.proxies import ProxyLoss
from keras_dml.losses.proxy_anchor import ProxyAnchor
from keras_dml.losses.proxy_nca import ProxyNCA
from keras_dml.losses.registry import ENTRIES, Entry, get, register
from keras_dml.losses.ranked_list import RankedList
from keras_dml.losses.signal_to_noise_ratio import SignalToNoiseRatioContrastive
from keras_dml.losses.smooth_ap import SmoothAP
from keras_dml.losses.soft_triple import SoftTriple
from keras_dml.losses.supervised_contrastive import NTXent, SupervisedContrastive
from keras_dml.losses.threshold_consistent_margin import ThresholdConsistentMargin
from keras_dml.losses.triplet import Triplet
from keras_dml.losses.vicreg import VICReg
from keras_dml.losses.tuplet_margin import TupletMargin

LOSSES = tuple(sorted(ENTRIES))
"""The names of the losses a user trains with, from the registry (the bases `PairLoss`
and `ProxyLoss` are for subclassing)."""

__all__ = [
    "Angular",
    "ArcFace",
    "BalancedContrastive",
    "BinLifted",
    "BinomialDeviance",
    "Circle",
    "Combined",
    "Contrastive",
    "CosFace",
    "CrossBatchMemory",
    "DynamicSoftMargin",
    "ENTRIES",
    "Entry",
    "FastAP",
    "GeneralizedLiftedStructure",
    "Histogram",
    "Instance",
    "InstanceCrossEntropy",
    "IntraPairVariance",
    "LOSSES",
    "LargeMarginSoftmax",
    "LiftedStructure",
    "LogRatio",
    "Manifold",
    "Margin",
    "MemoryBank",
    "MultiSimilarity",
    "MultipleNegativesRanking",
    "NCA",
    "NPair",
    "NTXent",
    "NormalizedSoftmax",
    "P2SGrad",
    "PNP",
    "PairLoss",
    "PairTerms",
    "Pairs",
    "ProxyAnchor",
    "ProxyLoss",
    "ProxyNCA",
    "RankedList",
    "Reference",
    "RelativeAbsoluteWeighting",
    "SignalToNoiseRatioContrastive",
    "SmoothAP",
    "SoftTriple",
    "SphereFace",
    "SubCenterArcFace",
    "SupervisedContrastive",
    "ThresholdConsistentMargin",
    "Triplet",
    "VICReg",
    "TupletMargin",
    "get",
    "register",
]
