"""A loss against its NumPy loop, with exact weights, on the batches every loss meets:
a shuffled C x k batch and an uneven one (classes of 4, 3, 2, 1 and 1 samples)."""

import numpy as np
import pytest

import loss_checks as checks
from pair_loss_checks import _batch, _uneven

BATCHES = ("cxk", "uneven")


def labelled(name, seed):
    """The batch called `name` in `BATCHES`."""
    return _batch(seed=seed) if name == "cxk" else _uneven(seed=seed)


def assert_matches_loop(loss, loop, labels, x, rtol=1e-5):
    """The value equals `loop(x as float64, labels)` and W is the exact derivative."""
    np.testing.assert_allclose(float(loss(labels, x)), loop(x.astype("float64"), labels),
                               rtol=rtol, atol=1e-6)
    checks.assert_exact_weights(loss, labels, x, atol=1e-5)


def loop_test(cases, seed):
    """A test over `cases` ({id: (loss factory, loop)}) x `BATCHES`: each value equals
    its loop, with exact weights (the batches drawn with `seed`)."""

    @pytest.mark.parametrize("case", cases)
    @pytest.mark.parametrize("batch", BATCHES)
    def test(case, batch):
        make, loop = cases[case]
        labels, x = labelled(batch, seed=seed)
        assert_matches_loop(make(), loop, labels, x)

    return test


def refusal_test(cases):
    """A test over `cases` [(factory, match)]: each factory raises a ValueError whose
    message matches (names the offending argument)."""

    @pytest.mark.parametrize("make, match", cases)
    def test(make, match):
        with pytest.raises(ValueError, match=match):
            make()

    return test
