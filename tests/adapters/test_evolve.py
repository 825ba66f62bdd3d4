"""`evolve` against its reference, `dataclasses.replace`."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.records import evolve
from adapters.types import (
    CacheControl,
    ChatRequest,
    ImagePart,
    Message,
    TextPart,
    ToolSpec,
    ToolUsePart,
)

MARKER = CacheControl(ttl="1h")
TEXT = TextPart("hello")
REQUEST = ChatRequest(
    "gpt-4o",
    (Message("user", (TEXT,)),),
    system=(TextPart("be brief"),),
    tools=(ToolSpec("grep", "search", {"type": "object"}),),
    max_tokens=16,
    session_id="s-1",
    extra={"reasoning_effort": "low"},
)


@pytest.mark.parametrize(
    ("record", "changes"),
    [
        (REQUEST, {"prompt_cache_key": "lt-1"}),
        (REQUEST, {"system": (), "messages": (), "prompt_cache_key": None}),
        (REQUEST, {}),
        (TEXT, {"cache_control": MARKER}),
        (ImagePart(url="https://x/y.png"), {"cache_control": MARKER}),
        (ToolUsePart("t1", "grep", "{}"), {"cache_control": MARKER}),
        (ToolSpec("grep", "search", {}), {"cache_control": MARKER}),
        (Message("assistant", (TEXT,), name="a"), {"content": ()}),
    ],
)
def test_evolve_is_replace(record: object, changes: dict[str, object]) -> None:
    got = evolve(record, **changes)
    want = dataclasses.replace(record, **changes)  # type: ignore[type-var]
    assert got == want
    assert type(got) is type(want)
    assert [getattr(got, f.name) for f in dataclasses.fields(want)] == [
        getattr(want, f.name) for f in dataclasses.fields(want)
    ]
    assert got is not record


@dataclasses.dataclass(frozen=True)
class KeywordOnly:
    a: int
    b: int = dataclasses.field(default=0, kw_only=True)


@dataclasses.dataclass(frozen=True)
class Derived:
    a: int
    b: int = dataclasses.field(init=False, default=7)


@dataclasses.dataclass(frozen=True)
class Single:
    a: int


@pytest.mark.parametrize(
    ("record", "changes"),
    [(KeywordOnly(1, b=2), {"b": 3}), (Derived(1), {"a": 2}), (Single(1), {"a": 2})],
)
def test_other_classes_go_through_replace(record: object, changes: dict[str, object]) -> None:
    assert evolve(record, **changes) == dataclasses.replace(record, **changes)  # type: ignore[type-var]


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(KeyError):
        evolve(TEXT, colour="red")
