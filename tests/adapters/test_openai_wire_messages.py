"""OpenAI chat messages: the shortcut that builds plain messages directly against
`decode_message`, on every message shape and error."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.errors import WireFormatError
from adapters.types import (
    Message,
)
from adapters.wire.openai.request import _decode_messages, decode_message

_MESSAGE_SHAPES: list[Any] = [
    {"role": role, "content": content, **extra}
    for role in ("system", "developer", "user", "assistant", "tool", "critic", 7, None, ["user"])
    for content in ("hi", "", None, 3, [{"type": "text", "text": "a"}], [{"type": "nope"}])
    for extra in (
        {},
        {"name": "ann"},
        {"name": 5},
        {"tool_call_id": "c1"},
        {"tool_call_id": 9},
        {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
        {"tool_calls": None, "tool_call_id": "c2"},
        {"tool_calls": "bad"},
    )
] + ["text", 3, None, [], {}]


def _decoded(decode: Any, raw: list[Any]) -> Any:
    try:
        return decode(raw)
    except WireFormatError as exc:
        return ("error", exc.field, exc.reason)


def _one_by_one(raw: list[Any]) -> list[Message]:
    return [decode_message(m, f"messages[{i}]") for i, m in enumerate(raw)]


@pytest.mark.parametrize("index", range(0, len(_MESSAGE_SHAPES), 7))
def test_messages_built_directly_equal_decode_message(index: int) -> None:
    """The shortcut for plain messages builds what `decode_message` builds, and leaves every
    other shape (and every error) to it: each shape after a plain one."""
    for shape in _MESSAGE_SHAPES[index : index + 7]:
        raw = [{"role": "user", "content": "x"}, shape]
        got, want = _decoded(_decode_messages, raw), _decoded(_one_by_one, raw)
        assert got == want, shape
        if not isinstance(got, tuple):
            assert [type(p) for m in got for p in m.content] == [
                type(p) for m in want for p in m.content
            ]
