"""Resolve loss identifiers such as "keras_dml>MultiSimilarity"."""

import keras


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
