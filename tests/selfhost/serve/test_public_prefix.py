"""Where a declared-public head ends in the engine's own prompt: every string outside the head is
marked, the renders agree up to the first private character, and only tokens of that common text
tokenised alone count as public."""

from __future__ import annotations

from typing import Any

from selfhost.serve.public_prefix import (
    SENTINEL,
    PublicHead,
    marked_request,
    public_token_count,
)


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d", "parameters": {}}}


def test_only_the_head_stays_unmarked() -> None:
    messages = [
        {
            "role": "system",
            "content": [{"type": "text", "text": "rules"}, {"type": "text", "text": "acme"}],
        },
        {"role": "developer", "content": "more"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c"}]},
    ]
    marked, tools = marked_request(messages, [tool("a"), tool("b")], PublicHead(tools=1, system=1))
    assert marked[0]["content"] == [
        {"type": "text", "text": "rules"},
        {"type": "text", "text": SENTINEL + "acme"},
    ]
    assert [m["content"] for m in marked[1:]] == [SENTINEL + "more", SENTINEL + "hi", SENTINEL]
    assert tools[0] == tool("a")
    assert tools[1]["function"]["name"] == SENTINEL + "b"
    assert SENTINEL in tools[1]["function"]["parameters"]
    assert messages[0]["content"][1]["text"] == "acme"  # the request itself is untouched


def test_a_system_string_is_one_part_and_later_system_messages_are_not_the_head() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": "hi"},
        {"role": "system", "content": "late note"},
    ]
    marked, _ = marked_request(messages, [], PublicHead(system=5))
    assert [m["content"] for m in marked] == ["rules", SENTINEL + "hi", SENTINEL + "late note"]


def codes(text: str) -> list[int]:
    """A toy tokenizer that merges "ab" into one token, as BPE merges across a boundary."""
    out: list[int] = []
    i = 0
    while i < len(text):
        if text.startswith("ab", i):
            out.append(1000)
            i += 2
        else:
            out.append(ord(text[i]))
            i += 1
    return out


def test_public_tokens_stop_before_a_token_that_borrows_a_private_character() -> None:
    text, marked = "xxa" + "bprivate", "xxa" + SENTINEL + "bprivate"
    prompt = codes(text)  # x x ab p r i ...: "ab" spans the end of the public text
    assert public_token_count(prompt, text, marked, codes) == 2
    assert public_token_count(codes("xxy"), "xxy", "xxy" + SENTINEL, codes) == 3
    assert public_token_count(prompt, text, SENTINEL + text, codes) == 0
