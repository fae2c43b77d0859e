"""A search request's parameters checked in full, before the request joins a batch.

Each parser takes what the client sent (text, or parsed JSON for a vector) and
returns the value the service uses, or raises a ValueError whose one line names
the parameter and its bad value. Every parameter has a ceiling, so no request can
ask for unbounded work.
"""

import dataclasses
import math
import re

import numpy as np

from keras_dml.serve.limits import parse_json

__all__ = ["MAX_FILTER_CHARS", "MAX_K", "MAX_RERANK", "parse_filter", "parse_k",
           "parse_rerank", "parse_threshold", "parse_vector"]

MAX_K = 100  # results per query at most
MAX_FILTER_CHARS = 4096
MAX_RERANK = {"depth": 200, "alpha": 100.0}  # every other re-ranking number: at most MAX_K
NUMBER = re.compile(r"-?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?", re.ASCII)


def _shown(value, limit=40):
    """`value`'s repr, cut to `limit` characters (a refusal never echoes a huge value)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def parse_k(text):
    """k, a whole number of ASCII digits from 1 to `MAX_K` (no sign, no spaces)."""
    text = str(text)
    if not (text.isascii() and text.isdigit() and len(text) <= 3):
        raise ValueError(f"k must be a whole number from 1 to {MAX_K}, got {_shown(text)}.")
    k = int(text)
    if not 1 <= k <= MAX_K:
        raise ValueError(f"k must be between 1 and {MAX_K}, got {k}.")
    return k


def parse_threshold(text, default):
    """The match threshold: a finite decimal number in ASCII, or `default` when absent."""
    if text is None or text == "":
        return default
    if len(text) > 32 or not NUMBER.fullmatch(text) or not math.isfinite(float(text)):
        raise ValueError(f"threshold must be a number, got {_shown(text)}.")
    return float(text)


def parse_vector(values, dim):
    """A float32 vector of `dim` finite numbers from a JSON list (strings, booleans and
    nulls refused, even numeric strings)."""
    if not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ValueError(f"vector must be a list of {dim} numbers (no strings, booleans or "
                         "nulls).")
    if dim is not None and len(values) != dim:
        raise ValueError(f"vector must be a list of {dim} numbers, got {len(values)}.")
    if not values:
        raise ValueError("vector must not be empty.")
    try:
        vector = np.asarray(values, np.float64)
    except OverflowError:  # an integer past float64
        vector = np.array([math.inf])
    with np.errstate(over="ignore"):  # past float32's range: inf, refused below
        single = vector.astype(np.float32)
    if not (np.isfinite(vector).all() and np.isfinite(single).all()):
        raise ValueError("vector must hold finite numbers (within float32's range).")
    return single


def parse_filter(text):
    """A dict filter (`keras_dml.index.filters`) from its JSON or its text form
    (`label == "boots" and price < 20`, as `keras-dml search --filter` takes it).

    Raises:
        ValueError: Too long, a control character (NUL...), JSON nested too deep,
            a bad escape or any other syntax error (the message says which).
    """
    if len(text) > MAX_FILTER_CHARS:
        raise ValueError(f"the filter has {len(text)} characters, more than "
                         f"{MAX_FILTER_CHARS}.")
    _no_control_characters(text)
    if text.lstrip().startswith("{"):
        value = parse_json(text, "the JSON filter")
        for string in _strings(value):  # escaped ones (\u0000) too
            _no_control_characters(string)
        return value
    from keras_dml.index.filter_expression import parse_expression

    try:
        return parse_expression(text)
    except SyntaxError:  # Python's literal parser: a bad escape (\x, \N{...}), a NUL
        raise ValueError("a string of the filter is malformed (a bad escape such as \\x or "
                         "\\N{...}).") from None
    except RecursionError:
        raise ValueError("the filter is nested too deep.") from None


def _no_control_characters(text):
    control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
    if control is not None:
        raise ValueError(f"the filter holds the control character {control!r}.")


def _strings(value):
    """Every string of parsed JSON `value`, keys included (its depth is bounded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def parse_rerank(text):
    """The re-ranking method `text` names (`qe`, `dba`, `k_reciprocal`, with options as
    `qe:n=2,alpha=3`), each option at most its ceiling (`MAX_RERANK`, else `MAX_K`)."""
    from keras_dml.evaluation.rerank import check, get

    if len(text) > 200:
        raise ValueError(f"rerank is {len(text)} characters long, more than 200.")
    if not text.isascii():
        raise ValueError(f"rerank must be ASCII, got {_shown(text)}.")
    reranker = check(get(text))
    for field in dataclasses.fields(reranker):
        value, ceiling = getattr(reranker, field.name), MAX_RERANK.get(field.name, MAX_K)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and (
                value > ceiling):
            raise ValueError(f"rerank {field.name}={value} is past its ceiling of {ceiling} "
                             "here.")
    return text
