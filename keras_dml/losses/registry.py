"""The loss registry: every trainable loss, with what its contract checks need.

`register` is the decorator of every loss class, keras_dml's and a user's. It
registers the class with Keras under a package (`compile(loss="keras_dml>Name")`,
`keras.losses.get` and `.keras` files find it there), records an `Entry` (what
`keras_dml.testing.check_loss` needs), and refuses at class definition what would be
lost or shadowed later: a constructor argument `get_config` does not save, an
`__init__` without `name` or `reduction`, a name already taken in its package.

keras_dml's own losses (classes defined in the keras_dml package) are in `ENTRIES`
under their bare names, in package "keras_dml"; a user's loss is in package
"Custom" (or the `package` it names) and in `USER_ENTRIES` under "package>Name", so
a user class named like a built-in never replaces it. Registering runs no test:
`keras_dml.testing.check_loss` does, where it is called.
"""

import difflib
import inspect
import typing

import keras

__all__ = ["ENTRIES", "Entry", "USER_ENTRIES", "entry_of", "get", "register"]

#: the package of keras_dml's own losses
PACKAGE = "keras_dml"
#: the package of a user's loss when `register` names none (Keras' default too)
USER_PACKAGE = "Custom"
#: Keras' own constructor arguments, saved by `keras.losses.Loss.get_config`
KERAS_ARGUMENTS = ("name", "reduction", "dtype")


class Entry(typing.NamedTuple):
    """What the contract checks need to know about a registered loss.

    Fields:
        cls: the loss class.
        example: constructor arguments of a small test instance (a batch of 4
            classes x 3 samples, dimension 8); {} when the defaults do.
        exact_weights: W is the exact derivative of the value, and the checks
            compare it with autodiff (False for a loss that states reweighted
            gradients on purpose, e.g. InstanceCrossEntropy).
        labels: "classes" (integer class ids (N,)) or "continuous" (float label
            vectors (N, k), e.g. LogRatio's).
        reference: the key sets the loss accepts: "any" (the batch by default, or
            an explicit `Reference` such as a memory), "batch" (the batch only) or
            "proxies" (its own learnable proxies).
        row_local: value[a] reads row a of the matrix only (a per-query value (N,)
            with W's row a = d value[a] / d matrix[a]), so that query a against a
            reference set equals query a alone in a batch with that set. False for
            a batch-global value (a scalar, an average over pairs) or a per-query
            value that reads other rows (Margin's beta, Histogram, SmoothAP).
        name: the registered name, "package>ClassName".
    """

    cls: type
    example: dict
    exact_weights: bool
    labels: str
    reference: str
    row_local: bool
    name: str = ""


ENTRIES = {}
"""keras_dml's own losses, by class name."""

USER_ENTRIES = {}
"""Losses registered from outside keras_dml, by registered name ("package>Name")."""

LABELS = ("classes", "continuous")
REFERENCES = ("any", "batch", "proxies")


def register(example=None, exact_weights=True, labels="classes", reference="any",
             row_local=True, package=None):
    """Class decorator: register a loss with Keras and record its `Entry`.

    Args:
        example: constructor arguments of a small instance for the contract checks
            (e.g. `{"num_classes": 8}`); None: the defaults.
        exact_weights: W is d value / d matrix (checked against autodiff).
        labels: "classes" or "continuous".
        reference: "any", "batch" or "proxies" (see `Entry`).
        row_local: value[a] reads row a of the matrix only (see `Entry`).
        package: the Keras package of the registered name ("package>ClassName").
            Defaults to "keras_dml" for keras_dml's own losses and "Custom" for any
            other; "keras_dml" is reserved for keras_dml's own.

    Raises:
        TypeError: where the class's `__init__` does not take `name` and
            `reduction`, or takes an argument that is neither in `config_keys`
            (saved by `get_config`) nor in `unsaved_keys`.
        ValueError: a bad option, or a different class already registered under
            the same name in the same package.
    """
    if labels not in LABELS:
        raise ValueError(f"register(labels={labels!r}): expected one of {LABELS}.")
    if reference not in REFERENCES:
        raise ValueError(f"register(reference={reference!r}): expected one of {REFERENCES}.")

    def decorate(cls):
        own = cls.__module__ == PACKAGE or cls.__module__.startswith(PACKAGE + ".")
        name_space = package or (PACKAGE if own else USER_PACKAGE)
        if name_space == PACKAGE and not own:
            raise ValueError(
                f"register(package={PACKAGE!r}) is keras_dml's own namespace: register "
                f"{cls.__name__} without package= (it goes to {USER_PACKAGE!r}) or with "
                "your project's name.")
        _check_constructor(cls)
        registered = f"{name_space}>{cls.__name__}"
        _refuse_a_clash(registered, cls)
        cls = keras.saving.register_keras_serializable(package=name_space)(cls)
        _KERAS_LOSS_NAMES[registered] = cls
        entry = Entry(cls, dict(example or {}), exact_weights, labels, reference, row_local,
                      registered)
        if name_space == PACKAGE:
            ENTRIES[cls.__name__] = entry
        else:
            USER_ENTRIES[registered] = entry
        return cls

    return decorate


def entry_of(cls):
    """The `Entry` of a registered loss class, or None."""
    for entry in (*ENTRIES.values(), *USER_ENTRIES.values()):
        if entry.cls is cls:
            return entry
    return None


def _check_constructor(cls):
    """Refuse an `__init__` whose arguments `get_config` would lose or Keras cannot pass."""
    parameters = inspect.signature(cls.__init__).parameters
    open_keywords = any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    missing = [key for key in ("name", "reduction") if key not in parameters]
    if missing and not open_keywords:
        raise TypeError(
            f"{cls.__name__}.__init__ takes no {' or '.join(map(repr, missing))}: Keras "
            "passes name, reduction and dtype when it rebuilds a loss from its config. Add "
            "`reduction=\"sum_over_batch_size\", name=None, dtype=None` and pass them to "
            "super().__init__.")
    saved = (set(getattr(cls, "config_keys", ())) | set(KERAS_ARGUMENTS)
             | _saved_by_own_get_config(cls))
    unsaved = set(getattr(cls, "unsaved_keys", ()))
    lost = [name for name, p in parameters.items()
            if name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            and name not in saved | unsaved]
    if lost:
        raise TypeError(
            f"{cls.__name__}.__init__ takes {', '.join(map(repr, lost))}, which get_config "
            f"would not save (a model saved with it would load with the default). Add "
            f"{'it' if len(lost) == 1 else 'them'} to config_keys (saved from the attribute "
            "of the same name), or to unsaved_keys if not a setting (a deprecated alias).")


def _saved_by_own_get_config(cls):
    """The arguments a `get_config` written below `PairLoss` takes charge of: those of
    the `__init__` of the class that defines it (a subclass's new ones are not)."""
    from keras_dml.losses.base import PairLoss

    owner = next(k for k in cls.__mro__ if "get_config" in vars(k))
    if owner is PairLoss or not issubclass(owner, PairLoss):
        return set()
    return set(inspect.signature(owner.__init__).parameters)


def _refuse_a_clash(registered, cls):
    """A different class already under `registered` is an error (the same class
    defined again, e.g. a re-run notebook cell, replaces it)."""
    taken = keras.saving.get_registered_object(registered)
    if taken is None or taken is cls:
        return
    if (taken.__module__, taken.__qualname__) == (cls.__module__, cls.__qualname__):
        return
    package = registered.split(">")[0]
    raise ValueError(
        f"{registered!r} is taken by {taken.__module__}.{taken.__qualname__}; register "
        f"{cls.__module__}.{cls.__qualname__} under another name or "
        f"package (register(package=...)). {package!r} keeps the class it has.")


#: Keras' table of loss names. Keras 3's `keras.losses.get` (and so a plain
#: `keras.Model.compile(loss=...)` at its first fit) reads a string from its own
#: built-ins' table only, never from the objects registered with
#: `register_keras_serializable`; the registered names ("keras_dml>Name") are added
#: to it, reached through the public function's module (a name with ">" never
#: collides with one of Keras'). None where a later Keras has no such table (then
#: only `keras_dml.losses.get` and `DMLModel.compile` take the string).
_KERAS_LOSS_NAMES = getattr(keras.losses.get, "__globals__", {}).get("ALL_OBJECTS_DICT")
if not isinstance(_KERAS_LOSS_NAMES, dict):
    _KERAS_LOSS_NAMES = {}


def get(identifier):
    """A loss instance from a loss, a serialized config, or a name.

    Names may be keras_dml class names ("MultiSimilarity", keras_dml's own only:
    a user's loss never shadows one), registered names ("keras_dml>MultiSimilarity",
    "Custom>MyLoss"), both built with their defaults, or anything `keras.losses.get`
    understands ("mse", ...). A bare name that is both a keras_dml loss and a Keras
    one ("Circle") is an error naming both spellings.
    """
    if isinstance(identifier, str) and ">" not in identifier and identifier in ENTRIES:
        if _keras_loss(identifier) is not None:
            raise ValueError(
                f"Loss {identifier!r} is ambiguous: keras_dml and Keras both have one. Pass "
                f'"keras_dml>{identifier}" (or keras_dml.losses.{identifier}()) for '
                f"keras_dml's, or keras.losses.{identifier}() for Keras'.")
        identifier = ENTRIES[identifier].name
    if isinstance(identifier, str) and ">" in identifier:
        cls = keras.saving.get_registered_object(identifier)
        if cls is None:
            raise ValueError(
                f"Unknown loss {identifier!r}: no class is registered under that name. "
                "Import keras_dml.losses (and the module of your own loss) first, check the "
                "spelling, and decorate your own loss with @keras_dml.losses.register().")
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
