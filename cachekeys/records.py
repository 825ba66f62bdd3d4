"""Copies of frozen dataclass records with some fields changed: `dataclasses.replace`, less its
per-field checks. The prepare path copies a request and its parts several times a call, and
`replace` reads each field with its own `getattr` (~16 for a `ChatRequest`): ~40 % of its cost.

Pure. Only for dataclasses whose fields are all positional `__init__` arguments (the canonical
types); any other class goes through `dataclasses.replace` itself.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def evolve(record: T, **changes: Any) -> T:
    """`dataclasses.replace(record, **changes)`: an equal record, made by its class's `__init__`."""
    cls: type[Any] = type(record)
    shape = _shape(cls)  # type: ignore[arg-type]  # a class is hashable (mypy reads type[Any])
    if shape is None:
        return dataclasses.replace(record, **changes)  # type: ignore[type-var]
    read, index = shape
    values = list(read(record))
    for name, value in changes.items():
        values[index[name]] = value  # an unknown field raises (KeyError)
    return cls(*values)  # type: ignore[no-any-return]


@functools.cache
def _shape(cls: type) -> tuple[Callable[[Any], tuple[Any, ...]], dict[str, int]] | None:
    """(all fields at once, each field's position) of a dataclass whose fields are all
    positional `__init__` arguments; None for any other class."""
    fields = dataclasses.fields(cls)
    if (
        len(fields) < 2  # one field: attrgetter would not return a tuple
        or len(fields) != len(cls.__dataclass_fields__)  # type: ignore[attr-defined]  # InitVar
        or any(not f.init or f.kw_only for f in fields)
    ):
        return None
    names = tuple(f.name for f in fields)
    return operator.attrgetter(*names), {name: i for i, name in enumerate(names)}
