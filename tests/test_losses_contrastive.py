"""Contrastive (keras_dml/losses/contrastive.py): a triplet miner's pair masks and the
arguments. Its settings against the NumPy loop, exact weights, modes, precision,
degenerate batches and serialization: tests/test_losses_cases.py."""

import pytest

from keras_dml import mining
from keras_dml.losses import Contrastive

import reference as ref
from pair_loss_checks import _batch


# -- mining ---------------------------------------------------------------------------------

def test_contrastive_with_semihard_miner_uses_its_pair_masks():
    labels, x = _batch(seed=11)
    miner = mining.SemiHardMiner()
    c = ref.cosine(x)
    kept = ref.triplets(x, labels, mining="semihard")
    positives = {(a, p) for a, p, _ in kept}
    negatives = {(a, n) for a, _, n in kept}
    expected = (sum(1.0 - c[a, p] for a, p in positives)
                + sum(max(0.0, c[a, n] - 0.5) for a, n in negatives)) / len(labels)
    assert float(Contrastive(miner=miner)(labels, x)) == pytest.approx(expected, rel=1e-5)


# -- arguments ----------------------------------------------------------------------------

@pytest.mark.parametrize("factory,match", [
    (lambda: Contrastive(metric="dot"), "metric"),
    (lambda: Contrastive(miner="semihard"), "miner"),
    (lambda: Contrastive(metric="euclidean", neg_margin=-1.0), "neg_margin"),
    (lambda: Contrastive(pos_margin=float("nan")), "pos_margin"),
])
def test_bad_arguments_raise_value_error(factory, match):
    with pytest.raises(ValueError, match=match):
        factory()

