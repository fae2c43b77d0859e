"""Search filters of `Index`, written as Python dicts, for every store.

A filter is a dict from a field to a condition; an item passes when it meets
every condition. Fields: `"id"`, `"label"`, `"added"` (when the item was
added: seconds since the epoch, a `datetime`, or an ISO 8601 date or time
such as `"2026-11-01"` or `"2026-11-01T08:30+01:00"`, UTC where it names no
zone), `"metadata"` (the whole metadata value) and any key of dict metadata
(e.g. `"year"`). A condition is
a value (equality), a list, tuple or set (membership), or a dict of operators
`"=="`, `"!="`, `"<"`, `"<="`, `">"`, `">="`, `"in"`, `"not in"`. An item
without the field, or whose value does not compare with the condition's,
does not pass. On the `"milvus"` backend a string is also accepted: Milvus'
own boolean expression over the fields `id`, `label`, `added` and `metadata`.
`keras_dml.index.filter_expression` reads the same filters written as text
(`'label == "cat" and year >= 2020'`), as `keras-dml search --filter` takes them.

Examples:

>>> parse({"label": "cat", "year": {">=": 2020}}, known={"year"})[1]
Condition(field='year', op='>=', value=2020)
"""

import dataclasses
import datetime
import json
import operator

import numpy as np

__all__ = ["Condition", "MEMBERSHIP", "OPERATORS", "milvus_expression", "milvus_literal", "parse",
           "passes"]

COLUMNS = ("id", "label", "added", "metadata")  # fields every item has
OPERATORS = {"==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
             ">": operator.gt, ">=": operator.ge}
MEMBERSHIP = ("in", "not in")


@dataclasses.dataclass(frozen=True)
class Condition:
    """One test of a filter: `field op value` (value: a list for membership)."""

    field: str
    op: str
    value: object


def parse(filter, known=(), kinds=None):
    """A dict filter as a list of `Condition`s.

    Args:
        filter: The dict described in the module docstring.
        known: Metadata keys the index holds; a field outside them and
            `COLUMNS` is refused (a typo would otherwise match nothing).
        kinds: `{"id": kind, "label": kind}`, each `"int"`, `"str"` or None
            (unknown): values of another kind are refused (they would match
            nothing). Defaults to None: not checked.

    Raises:
        ValueError: Not a dict, an unknown field or operator, a value that is
            neither a number, a string nor a boolean, an id or label of
            another kind than the index's, or a time added that is not a
            number, a datetime or an ISO 8601 string.
    """
    if not isinstance(filter, dict) or not filter:
        raise ValueError(f"filter must be a non-empty dict such as {{'label': ['cat']}}, got "
                         f"{filter!r}.")
    conditions = []
    for field, condition in filter.items():
        if field not in COLUMNS and field not in known:
            raise ValueError(f"filter names the unknown field {field!r}; the index has "
                             f"{sorted(set(COLUMNS) | set(known))}.")
        operators = condition if isinstance(condition, dict) else {_default_op(condition):
                                                                     condition}
        if not operators:
            raise ValueError(f"filter field {field!r} has an empty condition.")
        for op, value in operators.items():
            if op not in OPERATORS and op not in MEMBERSHIP:
                raise ValueError(f"filter field {field!r}: unknown operator {op!r}; use one of "
                                 f"{sorted(OPERATORS) + list(MEMBERSHIP)}.")
            value = _value(field, op, value)
            _check_kind(field, value, (kinds or {}).get(field))
            conditions.append(Condition(field, op, value))
    return conditions


def _default_op(value):
    return "in" if isinstance(value, (list, tuple, set, frozenset, np.ndarray)) else "=="


def _value(field, op, value):
    if op in MEMBERSHIP:
        if not isinstance(value, (list, tuple, set, frozenset, np.ndarray)):
            raise ValueError(f"filter field {field!r}: {op!r} needs a list, got {value!r}.")
        return [_scalar(field, v) for v in value]
    return _scalar(field, value)


def _scalar(field, value):
    if isinstance(value, datetime.datetime):
        return value.timestamp()
    if isinstance(value, np.generic):
        value = value.item()
    if field == "added":
        return _seconds(value)
    if isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"filter field {field!r}: values must be numbers, strings, booleans or "
                     f"datetimes, got {value!r}.")


def _seconds(value):
    """A time added as seconds since the epoch: a number, or an ISO 8601 string."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            moment = datetime.datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.timezone.utc)
            return moment.timestamp()
    raise ValueError(f"filter field 'added': a time is seconds since the epoch, a datetime or "
                     f"an ISO 8601 date or time such as '2026-11-01', got {value!r}.")


def _check_kind(field, value, kind):
    """Refuses ids or labels of another kind (`"int"` or `"str"`) than the index holds."""
    if kind is None:
        return
    for v in value if isinstance(value, list) else [value]:
        wanted = isinstance(v, str) if kind == "str" else (
            isinstance(v, int) and not isinstance(v, bool))
        if not wanted:
            name = "strings" if kind == "str" else "integers"
            raise ValueError(f"filter field {field!r}: the index's {field}s are {name}, got "
                             f"{v!r}.")


def item_value(field, item):
    """The value of `field` for an item given as a dict of its columns, or
    `MISSING` when it has none."""
    if field in COLUMNS:
        return item[field]
    metadata = item["metadata"]
    return metadata.get(field, MISSING) if isinstance(metadata, dict) else MISSING


MISSING = object()


def passes(conditions, item):
    """Whether an item (a dict of its columns) meets every condition."""
    for condition in conditions:
        value = item_value(condition.field, item)
        if value is MISSING or value is None:
            return False
        try:
            if condition.op in MEMBERSHIP:
                found = any(_equal(value, v) for v in condition.value)
                met = found if condition.op == "in" else not found
            elif condition.op in ("==", "!="):
                met = _equal(value, condition.value) == (condition.op == "==")
            else:
                met = (_comparable(value, condition.value)
                       and OPERATORS[condition.op](value, condition.value))
        except TypeError:
            met = False
        if not met:
            return False
    return True


def _equal(a, b):
    return _comparable(a, b) and a == b


def _comparable(a, b):
    """Numbers with numbers (booleans with booleans), strings with strings."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool)
    numbers = (int, float)
    return (isinstance(a, numbers) and isinstance(b, numbers)) or (
        isinstance(a, str) and isinstance(b, str))


def milvus_expression(conditions):
    """The Milvus boolean expression of `conditions` (metadata fields as the store
    keeps them: `keras_dml.index.milvus.metadata_path`)."""
    return " and ".join(f"({_milvus_condition(c)})" for c in conditions)


def _milvus_condition(condition):
    field = _milvus_field(condition.field)
    if condition.field in ("id", "label", "added") or condition.op not in (*MEMBERSHIP, "!="):
        return f"{field} {condition.op} {milvus_literal(condition.value)}"
    if condition.op == "!=":
        return _differs(field, condition.value)
    # Milvus (Lite) takes `in` on fields only, not on JSON paths: spelled out instead.
    if condition.op == "in":
        return " or ".join(f"{field} == {milvus_literal(v)}" for v in condition.value) or (
            f"exists {field} and not (exists {field})")  # in []: no item
    return " and ".join(_differs(field, v) for v in condition.value) or (
        f"exists {field}")  # not in []: every item that has the field


def _differs(field, value):
    """`field != value` for a metadata key: a Milvus server (2.3) passes an item without
    the key, Lite does not, so a number or string is asked below or above instead (an
    item without the key, or with a value of another kind, is neither)."""
    if isinstance(value, (bool, type(None))) or not isinstance(value, (int, float, str)):
        return f"{field} != {milvus_literal(value)}"
    return f"({field} < {milvus_literal(value)} or {field} > {milvus_literal(value)})"


def milvus_literal(value):
    """`value` as a Milvus literal: JSON, with non-ASCII characters as they are (Milvus
    reads no `\\uXXXX` escape: `"\\u00e9"` would be refused)."""
    return json.dumps(value, ensure_ascii=False)


def _milvus_field(field):
    from keras_dml.index.milvus import metadata_path

    if field in ("id", "label", "added"):
        return field
    return metadata_path(None if field == "metadata" else field)
