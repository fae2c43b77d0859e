"""Search filters written as text: `label == "sku-1" and price < 20 and added > "2026-11-01"`.

The text is read into the dict filter of `keras_dml.index.filters`, so it means
the same on every store (in memory the index evaluates it, on Milvus it becomes
Milvus' boolean expression over the fields and JSON paths). The syntax:

    EXPRESSION := CONDITION [and CONDITION]...
    CONDITION  := FIELD OP VALUE | FIELD in [VALUE, ...] | FIELD not in [VALUE, ...]
    OP         := == | != | < | <= | > | >=
    VALUE      := a number (12, -3.5, 1e3) | a string in "double" or 'single' quotes
                  | true | false

FIELD is `id`, `label`, `added` (when the item was added; compared with an ISO
8601 date or time such as "2026-11-01" or "2026-11-01T08:30:00+01:00", UTC
where it names no zone, or with seconds since the epoch), `metadata` (the whole
metadata value) or a key of dict metadata (`price`); a key that is not a plain
name (letters, digits, `_`) is written in backquotes: `` `list price` < 20 ``.
Keywords (`and`, `in`, `not`, `true`, `false`) take any case. Conditions are
joined with `and` only; alternatives of one field are written with `in`.
An item without the field, or whose value is of another type than the one
compared with, does not pass.

Examples:

>>> parse_expression('label == "cat" and price < 20')
{'label': {'==': 'cat'}, 'price': {'<': 20}}
>>> parse_expression("condition in ['new', 'as new'] and added >= '2026-11-01'")
{'condition': {'in': ['new', 'as new']}, 'added': {'>=': '2026-11-01'}}
"""

import ast
import re

__all__ = ["SYNTAX", "parse_expression"]

SYNTAX = ('FIELD OP VALUE joined with "and" (OP: == != < <= > >=, or FIELD in [A, B], '
          'FIELD not in [A, B]; strings in quotes)')

_TOKEN = re.compile(r"""
    (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.]))
  | (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
  | (?P<op>==|!=|<=|>=|<|>|=)
  | (?P<punct>[\[\](),])
  | (?P<word>[A-Za-z_]\w*)
  | (?P<quoted>`[^`]+`)
""", re.VERBOSE)
_KEYWORDS = ("and", "or", "not", "in", "true", "false")


class _Tokens:
    """The expression's tokens `(kind, text, column)`, read one at a time."""

    def __init__(self, text):
        self.text, self.tokens, position = text, [], 0
        while True:
            while position < len(text) and text[position].isspace():
                position += 1
            if position == len(text):
                break
            match = _TOKEN.match(text, position)
            if match is None:
                raise ValueError(f"unexpected {text[position]!r} at column {position + 1}; "
                                 f"write {SYNTAX}.")
            self.tokens.append((match.lastgroup, match.group(), position + 1))
            position = match.end()
        self.tokens.append(("end", "", len(text) + 1))
        self.position = 0

    def peek(self):
        return self.tokens[self.position]

    def take(self):
        token = self.tokens[self.position]
        self.position += 1
        return token

    def keyword(self, token):
        """The keyword a word token is (lower case), or None."""
        kind, text, _ = token
        return text.lower() if kind == "word" and text.lower() in _KEYWORDS else None

    def expected(self, what, token):
        _, text, column = token
        found = "the end" if token[0] == "end" else repr(text)
        return ValueError(f"expected {what} at column {column}, found {found}; write {SYNTAX}.")


def parse_expression(text):
    """The dict filter (`keras_dml.index.filters`) of a filter expression.

    Raises:
        ValueError: A syntax error (naming the column and what was expected),
            `or`, or one field compared twice with the same operator.
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"a filter expression is text such as 'label == \"cat\"', got "
                         f"{text!r}.")
    tokens = _Tokens(text)
    filter = {}
    while True:
        field, op, value = _condition(tokens)
        conditions = filter.setdefault(field, {})
        if op in conditions:
            raise ValueError(f"{field} {op} appears twice: give each field and operator once.")
        conditions[op] = value
        token = tokens.take()
        if token[0] == "end":
            return filter
        if tokens.keyword(token) == "or":
            raise ValueError(f"'or' (column {token[2]}) is not supported: conditions are joined "
                             "with 'and'; a field's alternatives are written FIELD in [A, B].")
        if tokens.keyword(token) != "and":
            raise tokens.expected("'and' or the end", token)


def _condition(tokens):
    """`(field, op, value)` of one condition."""
    token = tokens.take()
    kind, text, _ = token
    if kind == "quoted":
        field = text[1:-1]
    elif kind == "word" and tokens.keyword(token) is None:
        field = text
    else:
        raise tokens.expected("a field name (id, label, added, metadata or a metadata key)",
                              token)
    token = tokens.take()
    keyword = tokens.keyword(token)
    if keyword == "not" and tokens.keyword(tokens.peek()) == "in":
        tokens.take()
        return field, "not in", _list(tokens)
    if keyword == "in":
        return field, "in", _list(tokens)
    if token[0] != "op":
        raise tokens.expected("an operator (== != < <= > >= in, not in)", token)
    if token[1] == "=":
        raise ValueError(f"'=' at column {token[2]}: equality is written ==.")
    return field, token[1], _value(tokens)


def _list(tokens):
    token = tokens.take()
    if token[1] != "[":
        raise tokens.expected("'[' opening a list of values", token)
    values = []
    if tokens.peek()[1] == "]":
        tokens.take()
        return values
    while True:
        values.append(_value(tokens))
        token = tokens.take()
        if token[1] == "]":
            return values
        if token[1] != ",":
            raise tokens.expected("',' or ']'", token)


def _value(tokens):
    token = tokens.take()
    kind, text, _ = token
    if kind == "number":
        number = float(text)
        return int(text) if re.fullmatch(r"-?\d+", text) else number
    if kind == "string":
        return ast.literal_eval(text)
    keyword = tokens.keyword(token)
    if keyword in ("true", "false"):
        return keyword == "true"
    hint = " (strings are written in quotes)" if kind == "word" else ""
    raise tokens.expected(f"a value: a number, a quoted string, true or false{hint}", token)
