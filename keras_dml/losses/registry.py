"""The loss registry: every trainable loss, with what its contract tests need.

`register` is the decorator of every loss class: it registers the class with Keras
(package "keras_dml", so `compile(loss="keras_dml>Name")` and `.keras` files find it)
and records an `Entry` in `ENTRIES`. The shared contract tests
(tests/test_losses_contract.py) run over `ENTRIES`, so a loss added here is tested
without touching the test files.
"""

import difflib
import typing

import keras

__all__ = ["ENTRIES", "get", "register"]


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

    Names may be keras_dml class names ("MultiSimilarity"), registered names
    ("keras_dml>MultiSimilarity"), both built with their defaults, or anything
    `keras.losses.get` understands ("mse", ...). A bare name that is both a
    keras_dml loss and a Keras one ("Circle") is an error naming both spellings.
    """
    if isinstance(identifier, str) and ">" not in identifier and identifier in ENTRIES:
        if _keras_loss(identifier) is not None:
            raise ValueError(
                f"Loss {identifier!r} is ambiguous: keras_dml and Keras both have one. Pass "
                f'"keras_dml>{identifier}" (or keras_dml.losses.{identifier}()) for '
                f"keras_dml's, or keras.losses.{identifier}() for Keras'.")
        identifier = f"keras_dml>{identifier}"
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
    if isinstance(identifier, str):
        loss = _keras_loss(identifier)
        if loss is None:
            close = difflib.get_close_matches(identifier, ENTRIES, n=1, cutoff=0.6)
            raise ValueError(
                f"Unknown loss {identifier!r}: neither a keras_dml loss nor a Keras one"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + f". keras_dml's: {', '.join(sorted(ENTRIES))}.")
        return loss
    return keras.losses.get(identifier)


def _keras_loss(name):
    """Keras' own loss called `name`, or None."""
    try:
        return keras.losses.get(name)
    except ValueError:
        return None
