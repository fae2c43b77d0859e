"""MultiSimilarity and RelativeAbsoluteWeighting (keras_dml/losses/multi_similarity.py):
RAW is MS, and MS with any miner. Their settings against the NumPy loop, exact weights,
modes, precision, degenerate batches, serialization and a trained DMLModel:
tests/test_losses_cases.py."""

import numpy as np
import pytest

from keras_dml import mining
from keras_dml.losses import MultiSimilarity, RelativeAbsoluteWeighting
from keras_dml.weighting import pair_weights

import reference as ref
from pair_loss_checks import _batch, _uneven


# -- RAW and mining -------------------------------------------------------------------------

def test_relative_absolute_weighting_is_multi_similarity():
    labels, x = _uneven(seed=12)
    miner = mining.MultiSimilarityMiner(0.2)
    raw, ms = RelativeAbsoluteWeighting(miner=miner), MultiSimilarity(miner=miner)
    assert isinstance(raw, MultiSimilarity) and raw.name == "relative_absolute_weighting"
    np.testing.assert_array_equal(pair_weights(raw, labels, x), pair_weights(ms, labels, x))
    assert float(raw(labels, x)) == float(ms(labels, x))


@pytest.mark.parametrize("old, new", [
    ({"epsilon": 0.2}, {"miner": mining.MultiSimilarityMiner(0.2)}),
    ({"mining": False}, {"miner": None}),
    ({"mining": True}, {}),
], ids=["epsilon", "mining_false", "mining_true"])
def test_deprecated_mining_and_epsilon_are_the_miner_argument(old, new):
    labels, x = _uneven(seed=12)
    with pytest.deprecated_call(match="pass miner=None or miner=MultiSimilarityMiner"):
        deprecated = MultiSimilarity(**old)
    np.testing.assert_array_equal(pair_weights(deprecated, labels, x),
                                  pair_weights(MultiSimilarity(**new), labels, x))


def test_multi_similarity_with_any_miner():
    labels, x = _batch(seed=13)
    loss = MultiSimilarity(miner=mining.HardMiner())
    s = ref.cosine(x)
    total = 0.0
    for a, p, n in ref.triplets(x, labels, mining="hard"):
        total += np.log1p(np.exp(-2.0 * (s[a, p] - 0.5))) / 2.0
        total += np.log1p(np.exp(50.0 * (s[a, n] - 0.5))) / 50.0
    assert float(loss(labels, x)) == pytest.approx(total / len(labels), rel=1e-5)
