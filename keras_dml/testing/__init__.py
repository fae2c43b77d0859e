"""Checks a loss against the contract keras_dml's own losses pass: `check_loss`.

Call it from your own tests on a loss written outside keras_dml:

    from keras_dml.testing import check_loss

    def test_my_loss_keeps_the_contract():
        check_loss(MyLoss, example={"margin": 0.3})

It runs, on the installed backend, the checks of `keras_dml.testing.contract`
(`CHECKS`): W against autodiff, eager against compiled steps, `pair_weights`, the
config round trip, degenerate batches, mixed precision, reference sets and
`row_local`, and a `.keras` save loaded in a fresh Python process.
"""

from keras_dml.testing.contract import CHECKS

__all__ = ["CHECKS", "check_loss"]


def check_loss(cls, example=None, checks=None, **claims):
    """Runs the loss contract on `cls`; an AssertionError names the loss and the check.

    Args:
        cls: a loss class registered with `keras_dml.losses.register` (its entry
            gives what the loss claims: exact weights, labels, reference, row_local).
        example: constructor arguments of a small instance (4 classes x 3 samples,
            dimension 8). Defaults to the registered example. Use settings other
            than the defaults, so that the config check sees them survive.
        checks: names from `CHECKS` to run; None: every one.
        **claims: overrides of the registered entry's fields (`exact_weights`,
            `labels`, `reference`, `row_local`).

    Returns:
        The names of the checks run, in order.

    Raises:
        ValueError: an unregistered class, or an unknown check or claim.
        AssertionError: the first check the loss fails.
    """
    from keras_dml.losses.registry import entry_of

    entry = entry_of(cls)
    if entry is None:
        raise ValueError(f"check_loss({getattr(cls, '__name__', cls)!r}): not a registered "
                         "loss class; decorate it with @keras_dml.losses.register().")
    unknown = set(claims) - {"exact_weights", "labels", "reference", "row_local"}
    if unknown:
        raise ValueError(f"check_loss: unknown claims {sorted(unknown)}.")
    entry = entry._replace(**claims)
    if example is not None:
        entry = entry._replace(example=dict(example))
    names = list(CHECKS) if checks is None else list(checks)
    missing = [name for name in names if name not in CHECKS]
    if missing:
        raise ValueError(f"check_loss: unknown checks {missing}; known: {list(CHECKS)}.")
    for name in names:
        CHECKS[name](entry)
    return names

