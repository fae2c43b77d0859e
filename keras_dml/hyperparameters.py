"""Hyperparameter checks shared by losses, miners and layers: a clear ValueError, never a NaN later."""

import math


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


def integer_at_least(name, value, minimum):
    """`value` as an int >= `minimum` (bools and fractional numbers are refused)."""
    wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
    if (isinstance(value, bool) or not float(_number(name, value)).is_integer()
            or int(value) < minimum):
        raise ValueError(f"{name} must be {wanted}, got {value!r}.")
    return int(value)


def one_of(name, value, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}.")
    return value
