"""Constructor contract of every registered loss and every miner.

`metric` and `miner` are keyword-only, after each loss's own hyperparameters, with
real defaults; every argument is checked in the constructor (a ValueError naming
the argument and the value); `.keras` files and configs saved before the
keyword-only change still load.
"""

import inspect
import json
import math
import pathlib
import warnings

import keras
import numpy as np
import pytest

from keras_dml import losses, mining
from keras_dml.losses.registry import ENTRIES

DATA = pathlib.Path(__file__).parent / "data"
NAMES = sorted(ENTRIES)
MINERS = {name: getattr(mining, name) for name in mining.__all__
          if isinstance(getattr(mining, name), type)
          and issubclass(getattr(mining, name), mining.Miner)
          and getattr(mining, name) not in (mining.Miner, mining.TripletMiner)}
#: Keras' own arguments, and deprecated spellings with their own tests
NOT_CHECKED = {"self", "name", "dtype", "mining", "epsilon"}
#: a value no argument accepts: not a number, a metric, a miner, a loss nor a choice
TYPO = "cosin"


def _parameters(cls):
    return inspect.signature(cls.__init__).parameters


def _message(error):
    return str(error.value)


@pytest.mark.parametrize("name", NAMES)
def test_metric_and_miner_are_keyword_only_with_real_defaults(name):
    cls = ENTRIES[name].cls
    parameters = _parameters(cls)
    if "metric" in parameters:
        metric = parameters["metric"]
        assert metric.kind is inspect.Parameter.KEYWORD_ONLY
        assert metric.default in cls.metrics
        assert cls(**ENTRIES[name].example).metric == metric.default
    if "miner" in parameters:
        miner = parameters["miner"]
        assert miner.kind is inspect.Parameter.KEYWORD_ONLY
        assert miner.default is None or isinstance(mining.get(miner.default), mining.Miner)


@pytest.mark.parametrize("call", [
    lambda: losses.Contrastive("euclidean"),
    lambda: losses.NCA(2.0, "cosine"),
    lambda: losses.MultiSimilarity(2.0, 50.0, 0.5, None),
    lambda: losses.Triplet(0.1, "euclidean"),
    lambda: losses.NPair(0.002, "dot"),
])
def test_positional_metric_or_miner_is_refused(call):
    """An old positional call fails at once (never a silent different loss)."""
    with pytest.raises((TypeError, ValueError)):
        call()


@pytest.mark.parametrize("cls,metric", [(losses.Contrastive, "euclidean"),
                                        (losses.Triplet, "squared_euclidean"),
                                        (losses.LiftedStructure, "cosine")])
def test_deprecated_distance_keyword_still_works(cls, metric):
    with pytest.warns(DeprecationWarning, match="metric="):
        loss = cls(distance=metric)
    assert loss.metric == metric
    with pytest.raises(ValueError, match="metric="):
        cls(distance=metric, metric="dot")


def _configs_saved_before():
    with open(DATA / "loss_configs_before_keyword_only.json") as f:
        return json.load(f)


@pytest.mark.parametrize("key", sorted(_configs_saved_before()))
def test_configs_saved_before_keyword_only_load_unchanged(key):
    saved = _configs_saved_before()[key]
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        loss = keras.saving.deserialize_keras_object(saved)
    assert keras.saving.serialize_keras_object(loss) == saved


def test_model_saved_before_keyword_only_loads_with_its_losses():
    model = keras.saving.load_model(DATA / "model_with_losses_before_keyword_only.keras")
    contrastive, nca, multi_similarity, triplet = model.loss.losses
    assert (contrastive.metric, contrastive.pos_margin, contrastive.neg_margin) == (
        "euclidean", 0.1, 1.2)
    assert isinstance(contrastive.miner, mining.PairMarginMiner)
    assert (nca.metric, nca.scale, type(nca.miner)) == (
        "squared_euclidean", 4.0, mining.SemiHardMiner)
    assert (multi_similarity.metric, multi_similarity.miner.epsilon) == ("dot", 0.2)
    assert (triplet.metric, triplet.margin, triplet.miner.margin) == ("euclidean", 0.3, 0.05)
    assert model.loss.weights == [1.0, 0.5, 0.25, 2.0]
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    y = np.repeat(np.arange(4), 2).astype("int32")
    assert np.isfinite(float(model.loss(y, model(x))))


def _assert_refused(cls, arguments, name, value):
    with pytest.raises(ValueError) as error:
        cls(**{**arguments, name: value})
    assert name in _message(error), _message(error)
    assert str(value) in _message(error), _message(error)


def _checked_parameters(cls):
    return [name for name, p in _parameters(cls).items()
            if name not in NOT_CHECKED and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


@pytest.mark.parametrize("name", NAMES)
def test_every_loss_argument_is_checked_in_the_constructor(name):
    """A typo (in a metric, a miner, a number, a flag) or a NaN in any argument is a
    ValueError naming the argument and the value, at construction."""
    entry = ENTRIES[name]
    for parameter in _checked_parameters(entry.cls):
        _assert_refused(entry.cls, entry.example, parameter, TYPO)
        default = _parameters(entry.cls)[parameter].default
        if isinstance(default, float):
            _assert_refused(entry.cls, entry.example, parameter, math.nan)


@pytest.mark.parametrize("name", sorted(MINERS))
def test_every_miner_argument_is_checked_in_the_constructor(name):
    cls = MINERS[name]
    for parameter in _checked_parameters(cls):
        _assert_refused(cls, {}, parameter, TYPO)
        if isinstance(_parameters(cls)[parameter].default, float):
            _assert_refused(cls, {}, parameter, math.nan)


@pytest.mark.parametrize("cls,arguments,name,value", [
    (losses.NCA, {}, "scale", 0.0),
    (losses.NCA, {}, "metric", "cosin"),
    (losses.MultiSimilarity, {}, "alpha", -1.0),
    (losses.MultiSimilarity, {}, "miner", "HardestMiner"),
    (losses.Contrastive, {"metric": "euclidean"}, "neg_margin", -0.5),
    (losses.Contrastive, {}, "metric", "squared_euclidean"),
    (losses.Circle, {}, "gamma", 0.0),
    (losses.Histogram, {}, "bins", 1),
    (losses.Margin, {}, "alpha", -0.1),
    (losses.Margin, {}, "learn_beta", "yes"),
    (losses.SmoothAP, {}, "temperature", -0.01),
    (losses.SmoothAP, {}, "include_anchor", 2),
    (losses.SupervisedContrastive, {}, "temperature", 0.0),
    (losses.MultipleNegativesRanking, {}, "symmetric", "no"),
    (losses.NPair, {}, "tuples", "one"),
    (losses.BalancedContrastive, {}, "lam", 0.0),
    (losses.ProxyAnchor, {"num_classes": 8}, "proxy_lr_multiplier", 0.0),
    (losses.ProxyAnchor, {"num_classes": 8}, "num_classes", 0),
    (losses.SoftTriple, {"num_classes": 8}, "centers_per_class", 0),
    (losses.SubCenterArcFace, {"num_classes": 8}, "sub_centers", 0),
    (losses.ArcFace, {"num_classes": 8}, "scale", -64.0),
    (losses.CrossBatchMemory, {"loss": losses.Contrastive()}, "memory_size", 0),
    (losses.CrossBatchMemory, {"loss": losses.Contrastive(), "memory_size": 8},
     "memory_weight", -1.0),
    (losses.CrossBatchMemory, {"loss": losses.Contrastive(), "memory_size": 8},
     "include_batch_loss", "yes"),
    (losses.Combined, {"losses": [losses.NCA(), losses.Circle()]}, "weights", 0.5),
    (mining.PairMarginMiner, {}, "pos_margin", math.inf),
    (mining.MultiSimilarityMiner, {}, "epsilon", "0.1x"),
    (mining.DistanceWeighted, {}, "cutoff", 2.5),
    (mining.DistanceWeighted, {}, "negatives_per_positive", 0),
])
def test_out_of_range_arguments_are_refused_by_name(cls, arguments, name, value):
    _assert_refused(cls, arguments, name, value)
