"""Hyperparameter checks shared by losses, miners and layers.

Each raises a clear ValueError at once, never a NaN later.
"""

import functools
import math
import numbers
import warnings

__all__ = ["below_one", "boolean", "finite", "integer_at_least", "non_negative", "one_of",
           "positive", "renamed_keywords"]


def _number(name, value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}.") from None
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}.")
    return number


def finite(name, value):
    """`value` as a finite float."""
    return _number(name, value)


def positive(name, value):
    """`value` as a float > 0."""
    number = _number(name, value)
    if number <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}.")
    return number


def non_negative(name, value):
    """`value` as a float >= 0."""
    number = _number(name, value)
    if number < 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}.")
    return number


def below_one(name, value):
    """`value` as a float in [0, 1) (a momentum, a decay)."""
    number = _number(name, value)
    if not 0.0 <= number < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value!r}.")
    return number


def integer_at_least(name, value, minimum, strict=False, why=""):
    """`value` as an int >= `minimum`. Bools, strings and fractional numbers are
    refused; `strict=True` also refuses integral floats such as 2.0 (Python and NumPy
    integers only). `why` is appended to the message's requirement."""
    wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    integral = isinstance(value, numbers.Integral) if strict else (
        not isinstance(value, str) and float(_number(name, value)).is_integer())
    if isinstance(value, bool) or not integral or int(value) < minimum:
        raise ValueError(f"{name} must be {wanted}{why}, got {value!r}.")
    return int(value)


def boolean(name, value):
    """`value` as a bool: True or False (1 and 0 too); anything else is refused."""
    try:
        valid = not isinstance(value, str) and value in (True, False)
    except (TypeError, ValueError):  # an array has no single truth value
        valid = False
    if not valid:
        raise ValueError(f"{name} must be True or False, got {value!r}.")
    return bool(value)


def one_of(name, value, choices):
    """`value` when it is among `choices`; otherwise a ValueError naming `name`."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
    return value


#: The release that removes every name deprecated in 0.2: former keywords, former module
#: paths and the former names of `keras_dml.training` (CHANGELOG.md lists them).
#: tests/test_compatibility.py fails once `keras_dml.__version__` reaches it.
REMOVED_IN = "0.3"


def deprecation(what, instead):
    """The one wording of a deprecation: `WHAT is deprecated and removed in 0.3: INSTEAD.`"""
    return f"{what} is deprecated and removed in {REMOVED_IN}: {instead}."


def renamed(old_name, old_value, new_name, new_value, default=None):
    """`new_value`, or `old_value` given under the deprecated `old_name` (with a
    DeprecationWarning); `default` when neither is given."""
    if old_value is None:
        return default if new_value is None else new_value
    if new_value is not None and new_value is not old_value and not (
            isinstance(new_value, (str, numbers.Number)) and new_value == old_value):
        raise ValueError(f"Give {new_name}= only ({old_name}= is its deprecated name), "
                         f"got {new_name}={new_value!r} and {old_name}={old_value!r}.")
    shown = repr(old_value) if isinstance(old_value, (str, numbers.Number)) else ""
    warnings.warn(deprecation(f"{old_name}=", f"use {new_name}={shown}"),
                  DeprecationWarning, stacklevel=3)
    return old_value


def renamed_keywords(**new_names):
    """Decorator for a function (or `__init__`) whose keyword `old` is now
    `new_names[old]`: `old=` keeps working for a release, through `renamed` (a
    DeprecationWarning that names the new keyword; a ValueError if both are given
    and differ)."""
    def decorate(function):
        @functools.wraps(function)
        def accepting_old_names(*args, **kwargs):
            for old, new in new_names.items():
                if old in kwargs:
                    kwargs[new] = renamed(old, kwargs.pop(old), new, kwargs.get(new))
            return function(*args, **kwargs)
        return accepting_old_names
    return decorate
