"""The cache-scope line: where it lands in the client's JSON, and the typed request read back."""

from __future__ import annotations

import hashlib

from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from cachekeys.isolation import isolate, isolate_responses, scope_line
from cachekeys.normalise import PublicPrefix
from gateway.core.prompt_view import typed_view

LINE = scope_line("salt-of-alpha")
RULES = "Public house rules."
SCHEMA = {"type": "object", "properties": {}}


def test_line_is_keyed_and_does_not_carry_the_salt() -> None:
    tag = hashlib.sha256(b"lantern-provider-scope\0salt-of-alpha").hexdigest()[:16]
    assert f"[cache scope {tag}]\n" == LINE
    assert scope_line("salt-of-beta") != LINE and "salt" not in LINE


def anthropic_body() -> dict:
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 5,
        "system": [{"type": "text", "text": RULES}, {"type": "text", "text": "Private notes."}],
        "tools": [
            {"name": "lookup", "description": "Look up.", "input_schema": SCHEMA},
            {"name": "write", "description": "Write.", "input_schema": SCHEMA},
        ],
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_first_private_tool_gets_the_line() -> None:
    public = PublicPrefix(tool_names=frozenset({"lookup"}))
    body = anthropic_body()
    raw = isolate("anthropic", body, LINE, public)
    assert [t["description"] for t in raw["tools"]] == ["Look up.", LINE + "Write."]
    assert raw["system"] == body["system"] and body["tools"][1]["description"] == "Write."
    view = typed_view("anthropic", body, raw, anthropic_wire.decode_request(body))
    assert view == anthropic_wire.decode_request(raw)
    assert view.tools[1].description == LINE + "Write."


def test_without_private_tools_the_line_follows_the_public_system_blocks() -> None:
    rules = hashlib.sha256(RULES.encode()).hexdigest()
    public = PublicPrefix(
        tool_names=frozenset({"lookup", "write"}), system_sha256=frozenset({rules})
    )
    body = anthropic_body()
    raw = isolate("anthropic", body, LINE, public)
    assert [p["text"] for p in raw["system"]] == [RULES, LINE, "Private notes."]
    view = typed_view("anthropic", body, raw, anthropic_wire.decode_request(body))
    assert view == anthropic_wire.decode_request(raw)
    assert [p.text for p in view.system] == [RULES, LINE, "Private notes."]
    plain = isolate("anthropic", {**body, "tools": [], "system": "Private."}, LINE, public)
    assert plain["system"] == [{"type": "text", "text": LINE}, {"type": "text", "text": "Private."}]


def test_openai_system_message_and_function_descriptions() -> None:
    rules = hashlib.sha256(RULES.encode()).hexdigest()
    public = PublicPrefix(system_sha256=frozenset({rules}))
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": RULES},
            {"role": "system", "content": "Private notes."},
            {"role": "user", "content": "hi"},
        ],
    }
    raw = isolate("openai", body, LINE, public)
    assert [m["content"] for m in raw["messages"]] == [RULES, LINE, "Private notes.", "hi"]
    view = typed_view("openai", body, raw, openai_wire.decode_request(body))
    assert view == openai_wire.decode_request(raw)
    assert [p.text for p in view.system] == [RULES, LINE, "Private notes."]
    tool = {
        "type": "function",
        "function": {"name": "f", "description": "F.", "parameters": SCHEMA},
    }
    tagged = isolate("openai", {**body, "tools": [tool]}, LINE, public)
    assert tagged["tools"][0]["function"]["description"] == LINE + "F."
    assert tagged["messages"] == body["messages"]


def test_a_responses_body_gets_the_line_where_its_chat_twin_does() -> None:
    """A natively forwarded Responses body: the first private tool, else private
    instructions, else a system message after the input's leading public system items."""
    tool = {"type": "function", "name": "grep", "description": "Search.", "parameters": {}}
    rules = "Shared rules."
    public = PublicPrefix(
        tool_names=frozenset({"grep"}),
        system_sha256=frozenset({hashlib.sha256(rules.encode()).hexdigest()}),
    )
    own = {**tool, "name": "deploy"}
    tagged = isolate_responses({"tools": [tool, own], "input": "hi"}, LINE, public)
    assert tagged["tools"] == [tool, {**own, "description": LINE + "Search."}]
    private = isolate_responses({"instructions": "Ours.", "input": "hi"}, LINE, public)
    assert private == {"instructions": LINE + "Ours.", "input": "hi"}
    shared = isolate_responses({"instructions": rules, "input": "hi"}, LINE, public)
    assert shared["instructions"] == rules
    assert shared["input"] == [
        {"role": "system", "content": LINE},
        {"role": "user", "content": "hi"},
    ]
    items = [
        {"type": "message", "role": "developer", "content": rules},
        {"role": "user", "content": "q"},
    ]
    after = isolate_responses({"input": items}, LINE, public)
    assert after["input"] == [items[0], {"role": "system", "content": LINE}, items[1]]
