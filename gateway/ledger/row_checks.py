"""What each value of a usage row must be to fit the `usage` table on every dialect (SQLite
stores NaN as NULL; PostgreSQL refuses NUL), checked when the row is made: a row the database
would refuse must not block the spool behind it.

Two checks, one verdict: `RowChecks.fits` is the request path's (exact types, no call per value),
`RowChecks.broken_column` the full one that names what broke. A row `fits` passes is one that
`broken_column` passes; any other row gets `broken_column`.
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from operator import attrgetter
from typing import Any, Literal

import orjson
import sqlalchemy as sa

MAX_DIAGNOSIS_BYTES = 8192  # a diagnosis is a few hashes and counts, never prompt text

ColumnKind = Literal["text", "integer", "number", "other"]
# per column, in table order: (name, kind, required, bound: a text's length or an integer's end)
ColumnRule = tuple[str, ColumnKind, bool, int | None]
Values = Callable[[Any], tuple[Any, ...]]


class JsonText(str):
    """Text that a JSON encoder wrote (`orjson.dumps(...).decode()`): JSON by construction,
    hence without a raw NUL. The ledger checks only the size of a diagnosis so marked; any
    other text it parses before taking it."""

    __slots__ = ()


def values_of(names: tuple[str, ...]) -> Values:
    """An object's attributes `names` as a tuple, in one call (`attrgetter` of a single name
    would return the bare value)."""
    get = attrgetter(*names)
    return get if len(names) > 1 else lambda row: (get(row),)


def column_rule(column: sa.Column[Any]) -> ColumnRule:
    """What a value must be to fit `column`, compiled once per column."""
    kind, required = column.type, not column.nullable
    if isinstance(kind, sa.String):
        return column.name, "text", required, kind.length
    if isinstance(kind, sa.Integer):
        return column.name, "integer", required, 2**63 if isinstance(kind, sa.BigInteger) else 2**31
    if isinstance(kind, sa.Float):
        return column.name, "number", required, None
    return column.name, "other", required, None


class RowChecks:
    """The rules of a table's text, integer and number columns (its "other" columns, the
    timestamp and money, are the row's own to check), compiled once."""

    def __init__(self, table: sa.Table) -> None:
        rules = [rule for rule in map(column_rule, table.columns) if rule[1] != "other"]
        self.rules: tuple[ColumnRule, ...] = tuple(rules)
        texts = [rule for rule in rules if rule[1] == "text"]
        integers = [rule for rule in rules if rule[1] == "integer"]
        numbers = [rule for rule in rules if rule[1] == "number"]
        self._texts = values_of(tuple(name for name, *_ in texts))
        self._text_required = tuple(required for _, _, required, _ in texts)
        # the longest text a column holds (TEXT: any, as `sys.maxsize` characters are none)
        self._text_bounds = tuple(sys.maxsize if n is None else n for *_, n in texts)
        self._integers = values_of(tuple(name for name, *_ in integers))
        # a None there (no integer column is nullable) goes to `broken_column`, as a 0 end does
        self._integer_ends = tuple(0 if end is None else end for *_, end in integers)
        self._numbers = values_of(tuple(name for name, *_ in numbers))
        self._number_required = tuple(required for _, _, required, _ in numbers)

    def fits(self, row: object) -> bool:
        """True when every checked column holds a value of its exact plain type that fits its
        rule. False: `broken_column` decides (it names what broke, or passes a row of other
        types, such as an int in a float column). No call per value: it runs for every row."""
        # zip() without strict=: a keyword costs it a dict per call; the lengths match by
        # construction
        texts, required_texts = self._texts(row), self._text_required
        for value, required, bound in zip(texts, required_texts, self._text_bounds):  # noqa: B905
            if type(value) is str or type(value) is JsonText:
                if "\x00" in value or value[bound:]:  # `value[bound:]`: "" when it fits
                    return False
            elif value is not None or required:
                return False
        for value, end in zip(self._integers(row), self._integer_ends):  # noqa: B905
            if type(value) is not int or not 0 <= value < end:  # not a bool either
                return False
        for value, required in zip(self._numbers(row), self._number_required):  # noqa: B905
            if type(value) is float:
                if not 0.0 <= value < math.inf:  # finite and not negative (NaN compares false)
                    return False
            elif value is not None or required:
                return False
        return True

    def broken_column(self, row: object) -> str | None:
        """The message naming the first column whose value breaks its rule; None when all
        fit. One loop over the rules (not a function per column)."""
        for name, kind, required, bound in self.rules:
            value = getattr(row, name)
            if value is None:
                if required:
                    return f"UsageRow.{name} is required"
            elif kind == "text":
                if not isinstance(value, str) or "\x00" in value:
                    return f"UsageRow.{name} must be text without NUL characters"
                if bound is not None and len(value) > bound:
                    return f"UsageRow.{name} is longer than {bound} characters"
            elif kind == "integer":
                assert bound is not None
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < bound:
                    return f"UsageRow.{name} must be an integer in [0, {bound})"
            elif kind == "number" and (
                not isinstance(value, int | float) or not math.isfinite(value) or value < 0
            ):
                return f"UsageRow.{name} must be a finite number >= 0"
        return None


def check_diagnosis(text: str) -> None:
    """Refuses a diagnosis over `MAX_DIAGNOSIS_BYTES` or, unless it is `JsonText`, not JSON."""
    if type(text) is JsonText and text.isascii() and not text[MAX_DIAGNOSIS_BYTES:]:
        return  # the gateway's own JSON in ASCII: a byte a character, its length its size
    num_bytes = len(text) if text.isascii() else len(text.encode())
    if num_bytes > MAX_DIAGNOSIS_BYTES:
        raise ValueError(f"cache_diagnosis is over {MAX_DIAGNOSIS_BYTES} bytes")
    if type(text) is JsonText:
        return
    try:
        orjson.loads(text)  # the common case, at a fraction of json's cost
    except orjson.JSONDecodeError:
        json.loads(text)  # ValueError when it is not JSON (json also takes a lone surrogate)
