"""`slot_init` writes the `__init__` that `dataclasses` writes, less `object.__setattr__`."""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import InitVar, dataclass, field
from typing import Any

import pytest

from adapters.records import slot_init
from adapters.types import ChatRequest, Message, TextPart, Usage
from cachekeys.layout import PromptBlock
from gateway.core.calls import Admitted
from gateway.ledger.models import UsageRow
from gateway.ports import CallRecord, PreparedPrompt


def _pair() -> tuple[type[Any], type[Any]]:
    """The same class twice: as `dataclasses` makes it, and with `slot_init`."""

    def make() -> type[Any]:
        @dataclass(frozen=True, slots=True)
        class Record:
            name: str
            count: int = 3
            tags: list[str] = field(default_factory=list)
            label: str = field(default="x", init=False)
            seen: list[str] = field(default_factory=lambda: ["init"], init=False)
            derived: str = field(default="", init=False)
            mode: str = field(default="fast", kw_only=True)
            level: int = field(kw_only=True, default=0)

            def __post_init__(self) -> None:
                object.__setattr__(self, "derived", f"{self.name}:{self.count}")

        return Record

    return make(), slot_init(make())


CALLS: list[tuple[tuple[Any, ...], dict[str, Any]]] = [
    (("a",), {}),
    (("a", 5), {}),
    (("a", 5, ["t"]), {"mode": "slow", "level": 2}),
    ((), {"name": "b", "tags": ["u"]}),
    (("a",), {"count": 1, "level": 9}),
]


@pytest.mark.parametrize(("args", "kwargs"), CALLS)
def test_the_same_record_from_the_same_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    plain, quick = _pair()
    want, got = plain(*args, **kwargs), quick(*args, **kwargs)
    assert dataclasses.astuple(got) == dataclasses.astuple(want)
    assert repr(got).split("(", 1)[1] == repr(want).split("(", 1)[1]


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [((), {}), (("a", 1, [], "extra"), {}), (("a",), {"nope": 1}), (("a",), {"label": "y"})],
)
def test_the_same_errors_from_bad_arguments(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    plain, quick = _pair()
    with pytest.raises(TypeError) as want:
        plain(*args, **kwargs)
    with pytest.raises(TypeError) as got:
        quick(*args, **kwargs)
    assert str(got.value) == str(want.value)


def test_the_same_signature_still_frozen_and_fresh_factories() -> None:
    plain, quick = _pair()
    assert str(inspect.signature(quick)) == str(inspect.signature(plain))
    a, b = quick("a"), quick("a")
    assert a == b
    assert a.tags is not b.tags and a.seen is not b.seen  # a factory call per instance
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "b"  # type: ignore[misc]


def test_a_subclass_sets_the_fields_it_inherits() -> None:
    @dataclass(frozen=True, slots=True)
    class Base:
        x: int

    @slot_init
    @dataclass(frozen=True, slots=True)
    class Child(Base):
        y: int = 2

    assert (Child(1).x, Child(1).y, Child(1, 5).y) == (1, 2, 5)


def test_only_frozen_slotted_dataclasses_without_initvars() -> None:
    @dataclass(frozen=True)
    class Unslotted:
        x: int

    @dataclass(slots=True)
    class Thawed:
        x: int

    @dataclass(frozen=True, slots=True)
    class WithInitVar:
        x: int
        y: InitVar[int] = 0

    for cls in (Unslotted, Thawed, WithInitVar, int):
        with pytest.raises(TypeError, match="slot_init"):
            slot_init(cls)


@pytest.mark.parametrize(
    "cls",
    [
        ChatRequest,
        Message,
        TextPart,
        Usage,
        PromptBlock,
        PreparedPrompt,
        Admitted,
        CallRecord,
        UsageRow,
    ],
)
def test_the_records_every_call_builds_use_it(cls: type) -> None:
    """The request path's records (their count per call is in bench/request_budget.json), and
    the ledger row its writer thread builds from each call's line."""
    assert "__set_" + dataclasses.fields(cls)[0].name in cls.__init__.__code__.co_names  # type: ignore[misc]
