"""The loss registry: every trainable loss, with what its contract tests need.

`register` is the decorator of every loss class: it registers the class with Keras
(package "keras_dml", so `compile(loss="keras_dml>Name")` and `.keras` files find it)
and records an `Entry` in `ENTRIES`. The shared contract tests
(tests/test_losses_contract.py) run over `ENTRIES`, so a loss added here is tested
without touching the test files.
"""

import typing

import keras


class Entry(typing.NamedTuple):
    """What the contract tests need to know about a registered loss.

    Fields:
        cls: the loss class.
        example: constructor arguments of a small test instance (a batch of 4
            classes x 3 samples, dimension 8).
        exact_weights: W is the exact derivative of the value (False for a loss
            that states reweighted gradients, e.g. InstanceCrossEntropy).
        labels: "classes" (integer class ids) or "continuous" (float label vectors).
        reference: "any" (accepts an explicit reference set), "batch" (its
            reference set is the batch only) or "proxies" (the reference set is its
            proxies).
        row_local: value[a] depends on row a of the matrix only (so a query against
            a reference set equals that query alone in a batch with the reference).
    """

    cls: type
    example: dict
    exact_weights: bool
    labels: str
    reference: str
    row_local: bool


ENTRIES = {}


def register(example=None, exact_weights=True, labels="classes", reference="any",
             row_local=True):
    """Class decorator: register a loss with Keras and in `ENTRIES` (see `Entry`)."""

    def decorate(cls):
        cls = keras.saving.register_keras_serializable(package="keras_dml")(cls)
        ENTRIES[cls.__name__] = Entry(cls, dict(example or {}), exact_weights, labels,
                                      reference, row_local)
        return cls

    return decorate


def get(identifier):
    """A loss instance from a loss, a serialized config, or a name.

    Names may be registered names ("keras_dml>MultiSimilarity", built with its
    defaults) or anything `keras.losses.get` understands ("mse", ...).
    """
    if isinstance(identifier, str) and ">" in identifier:
        cls = keras.saving.get_registered_object(identifier)
        if cls is None:
            raise ValueError(
                f"Unknown loss {identifier!r}: no class is registered under that name. "
                "Import keras_dml.losses first, and check the spelling."
            )
        try:
            return cls()
        except TypeError as error:
            raise ValueError(
                f"{identifier!r} needs constructor arguments ({error}); pass an instance, "
                f"e.g. {identifier.split('>')[-1]}(num_classes=...), or a serialized config."
            ) from None
    return keras.losses.get(identifier)
