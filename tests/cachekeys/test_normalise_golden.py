"""Golden tests: each normalisation switch, on the client's wire JSON (what is forwarded) and
as the gateway reads the result back (the typed view of the normalised body)."""

from __future__ import annotations

import json
from dataclasses import replace

from adapters.types import CacheControl, TextPart, ToolSpec
from cachekeys.canonical import canonical_arguments, canonical_schema, tool_digest
from cachekeys.normalise import Edits, NormaliseOptions, PublicPrefix, normalise, normalise_edits
from cachekeys.volatile import VolatileMatcher
from tests.cachekeys.conftest import agent_request, normalised

# tool order and schemas only: the two switches that edit history or move values turned off
ORDER_ONLY = NormaliseOptions(canonical_tool_args=False, relocate_volatile=False)
# every pattern, dates too (policy `always`), history left alone
RELOCATE = NormaliseOptions(canonical_tool_args=False, volatile=VolatileMatcher.build())


def test_canonical_schema_sorts_keys_and_required_but_keeps_other_arrays() -> None:
    schema = {
        "type": "object",
        "required": ["z", "a"],
        "properties": {"z": {"enum": ["b", "a"]}, "a": {"type": "string"}},
    }
    assert json.dumps(canonical_schema(schema)) == (
        '{"properties": {"a": {"type": "string"}, "z": {"enum": ["b", "a"]}}, '
        '"required": ["a", "z"], "type": "object"}'
    )


def test_canonical_arguments() -> None:
    assert (
        canonical_arguments('{"b": 1, "a": {"d": 2, "c": [3, {"f": 4, "e": 5}]}}')
        == '{"a":{"c":[3,{"e":5,"f":4}],"d":2},"b":1}'
    )
    assert canonical_arguments("not json") == "not json"


def test_tools_sorted_by_name_with_schema_keys_sorted() -> None:
    out = normalised(agent_request(tools=("search", "edit", "ask")), ORDER_ONLY)
    assert [t.name for t in out.tools] == ["ask", "edit", "search"]
    assert list(out.tools[0].input_schema) == ["properties", "required", "type"]
    assert out.tools[0].input_schema["required"] == ["a", "b"]


def test_public_tools_come_first() -> None:
    options = NormaliseOptions(public=PublicPrefix(tool_names=frozenset({"search"})))
    out = normalised(agent_request(tools=("search", "edit", "ask")), options)
    assert [t.name for t in out.tools] == ["search", "ask", "edit"]


def test_client_tool_marker_moves_to_the_new_last_tool() -> None:
    request = agent_request(tools=("b", "a"))
    marked = replace(
        request,
        tools=(request.tools[0], replace(request.tools[1], cache_control=CacheControl("1h"))),
    )
    out = normalised(marked, ORDER_ONLY, "anthropic")
    assert [(t.name, t.cache_control) for t in out.tools] == [
        ("a", None),
        ("b", CacheControl("1h")),
    ]


def test_switches_off_leave_the_request_alone() -> None:
    request = agent_request(tools=("search", "edit"))
    off = NormaliseOptions(order_tools=False, canonical_json=False)
    assert normalised(request, off) == request
    assert [t.name for t in normalised(request, off).tools] == ["search", "edit"]


def test_relocation_moves_volatile_values_to_the_newest_user_turn() -> None:
    system = "Today is 2026-11-30T09:18:42Z. Request req_8f3k2m9x1q. Session 123e4567-e89b-12d3-a456-426614174000 at 3:07 PM."
    out = normalised(agent_request(system=system), RELOCATE)
    assert out.system == (
        TextPart(
            "Today is {{volatile:1}}. Request {{volatile:2}}. Session {{volatile:3}} at {{volatile:4}}."
        ),
    )
    assert out.messages[-1].content[-1] == TextPart(
        "<volatile-context>\n{{volatile:1}} = 2026-11-30T09:18:42Z\n{{volatile:2}} = req_8f3k2m9x1q\n"
        "{{volatile:3}} = 123e4567-e89b-12d3-a456-426614174000\n{{volatile:4}} = 3:07 PM"
    )
    assert out.messages[0].content[0] == TextPart(
        "Fix the bug."
    )  # the user's own text is untouched


def test_relocation_gives_identical_prefixes_a_second_apart() -> None:
    a = normalised(agent_request(system="Now: 2026-11-30T09:18:42Z."), RELOCATE)
    b = normalised(agent_request(system="Now: 2026-11-30T09:18:43Z."), RELOCATE)
    assert a.system == b.system and a.tools == b.tools
    assert a.messages[-1] != b.messages[-1]


def test_relocation_in_tool_descriptions_and_tenant_patterns() -> None:
    matcher = VolatileMatcher.build([r"ticket-\d+"], use_defaults=False)
    request = agent_request()
    request = replace(
        request,
        tools=(
            ToolSpec(
                "search",
                "Search (ticket-4411)",
                {"type": "object", "description": "for ticket-4411"},
            ),
        ),
    )
    out = normalised(request, NormaliseOptions(relocate_volatile=True, volatile=matcher))
    assert out.tools[0].description == "Search ({{volatile:1}})"
    assert out.tools[0].input_schema == {"type": "object", "description": "for {{volatile:1}}"}
    assert out.messages[-1].content[-1].text == "<volatile-context>\n{{volatile:1}} = ticket-4411"


def test_relocation_never_touches_history() -> None:
    request = agent_request(system="plain", turns=3)
    history = replace(request, messages=(*request.messages[:-1], request.messages[-1]))
    assert normalised(history, RELOCATE) == normalised(request, ORDER_ONLY)


def test_relocation_after_a_tool_turn_adds_a_user_turn() -> None:
    from adapters.types import Message, ToolResultPart

    request = agent_request(system="at 10:15")
    request = replace(
        request,
        messages=(*request.messages, Message("tool", (ToolResultPart("c1", (TextPart("ok"),)),))),
    )
    out = normalised(request, RELOCATE)
    assert out.messages[-2] == request.messages[-1]
    assert out.messages[-1].role == "user" and out.messages[-1].content[0].text.startswith(
        "<volatile-context>"
    )


def test_tool_digest_ignores_markers_and_key_order() -> None:
    a = ToolSpec("s", "d", {"b": 1, "a": 2})
    b = ToolSpec("s", "d", {"a": 2, "b": 1}, CacheControl("1h"))
    assert tool_digest(a) == tool_digest(b)


# --- raw wire dicts -----------------------------------------------------------------------------

ANTHROPIC_BODY = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 100,
    "system": "Time: 2026-11-30T09:18:42Z. Be brief.",
    "tools": [
        {
            "name": "search",
            "description": "s",
            "input_schema": {"type": "object", "properties": {"q": {}, "a": {}}},
        },
        {
            "name": "edit",
            "description": "e",
            "input_schema": {"properties": {}, "type": "object"},
            "cache_control": {"type": "ephemeral"},
        },
    ],
    "messages": [
        {"role": "user", "content": "Fix it."},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "sig=="},
                {"type": "tool_use", "id": "t1", "name": "search", "input": {"z": 1, "a": 2}},
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "found"}],
        },
    ],
    "metadata": {"user_id": "u1"},
}


def test_raw_anthropic_golden_order_only() -> None:
    out = normalise("anthropic", ANTHROPIC_BODY, ORDER_ONLY)
    assert out["tools"] == [
        {"name": "edit", "description": "e", "input_schema": {"properties": {}, "type": "object"}},
        {
            "name": "search",
            "description": "s",
            "input_schema": {"properties": {"a": {}, "q": {}}, "type": "object"},
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert (
        json.dumps(out["tools"][1]["input_schema"])
        == '{"properties": {"a": {}, "q": {}}, "type": "object"}'
    )
    assert out["messages"] is ANTHROPIC_BODY["messages"]  # history untouched, not even copied
    assert (
        out["system"] == ANTHROPIC_BODY["system"] and out["metadata"] is ANTHROPIC_BODY["metadata"]
    )
    assert ANTHROPIC_BODY["tools"][0]["name"] == "search"  # the input was not mutated


def test_the_default_relocates_per_call_values_but_not_a_date_alone() -> None:
    body = {**ANTHROPIC_BODY, "system": "Today 2026-11-30, now 09:18 (run_8f3k2m9x1q)."}
    out, edits = normalise_edits("anthropic", body, NormaliseOptions())
    assert out["system"] == "Today 2026-11-30, now {{volatile:1}} ({{volatile:2}})."
    assert edits == Edits(("clock_time", "request_id"), 1)
    assert out["messages"][2]["content"][-1]["text"] == (
        "<volatile-context>\n{{volatile:1}} = 09:18\n{{volatile:2}} = run_8f3k2m9x1q"
    )
    out, edits = normalise_edits("anthropic", body, RELOCATE)  # `always`: the date too
    assert out["system"] == "Today {{volatile:1}}, now {{volatile:2}} ({{volatile:3}})."
    assert edits.relocated == ("clock_time", "date", "request_id")


def test_raw_anthropic_golden_default_switches() -> None:
    out, edits = normalise_edits("anthropic", ANTHROPIC_BODY, NormaliseOptions())
    assert out["system"] == "Time: {{volatile:1}}. Be brief."
    assert out["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "hm",
        "signature": "sig==",
    }
    assert json.dumps(out["messages"][1]["content"][1]["input"]) == '{"a": 2, "z": 1}'
    assert edits == Edits(("iso_datetime",), 1)
    assert out["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "found"},
        {
            "type": "text",
            "text": "<volatile-context>\n{{volatile:1}} = 2026-11-30T09:18:42Z",
        },
    ]


OPENAI_BODY = {
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "Session 123e4567-e89b-12d3-a456-426614174000."},
        {"role": "user", "content": "Hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "b", "arguments": '{"y": 1, "x": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "system", "content": "Mid-conversation note at 2026-11-30."},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "b", "parameters": {"type": "object", "properties": {}}},
        },
        {
            "type": "function",
            "function": {"name": "a", "description": "A", "parameters": {"type": "object"}},
        },
    ],
}


def test_raw_openai_golden() -> None:
    options = NormaliseOptions(relocate_volatile=True, canonical_tool_args=True)
    out = normalise("openai", OPENAI_BODY, options)
    assert [t["function"]["name"] for t in out["tools"]] == ["a", "b"]
    assert list(out["tools"][1]["function"]["parameters"]) == ["properties", "type"]
    assert out["messages"][0] == {"role": "system", "content": "Session {{volatile:1}}."}
    assert out["messages"][2]["tool_calls"][0]["function"]["arguments"] == '{"x":2,"y":1}'
    assert out["messages"][4] == OPENAI_BODY["messages"][4]  # a later system turn is history
    assert out["messages"][5] == {
        "role": "user",
        "content": [
            {
                "type": "text",
                "text": "<volatile-context>\n{{volatile:1}} = 123e4567-e89b-12d3-a456-426614174000",
            }
        ],
    }


def test_the_typed_view_is_the_normalised_body_decoded() -> None:
    from adapters.wire import anthropic as anthropic_wire
    from adapters.wire import openai as openai_wire
    from gateway.core.prompt_view import ToolLists, typed_view

    options = NormaliseOptions(relocate_volatile=True, canonical_tool_args=True)
    tool_lists = ToolLists()
    for wire, body, codec in (
        ("anthropic", ANTHROPIC_BODY, anthropic_wire),
        ("openai", OPENAI_BODY, openai_wire),
    ):
        for switches in (ORDER_ONLY, options):
            out = normalise(wire, body, switches)  # type: ignore[arg-type]
            view = typed_view(wire, body, out, codec.decode_request(body))  # type: ignore[arg-type]
            assert view == codec.decode_request(out)
            for _ in range(2):  # the decoded tool lists, on first sight and reused
                memo = typed_view(wire, body, out, codec.decode_request(body), tool_lists)  # type: ignore[arg-type]
                assert memo == view


def test_a_broad_tenant_pattern_never_rewrites_a_placeholder() -> None:
    matcher = VolatileMatcher.build([r"\d+"], use_defaults=False)
    options = NormaliseOptions(relocate_volatile=True, volatile=matcher)
    once = normalised(agent_request(system="Build 4411 of 12"), options)
    assert once.system[0].text == "Build {{volatile:1}} of {{volatile:2}}"
    assert normalised(once, options).system == once.system


def test_policy_rejects_patterns_that_cannot_be_combined() -> None:
    import pytest
    from pydantic import ValidationError

    from policies.cache import NormalisePolicy

    with pytest.raises(ValidationError, match="cannot be combined"):
        NormalisePolicy(volatile_patterns=("(?P<n>a)", "(?P<n>b)"))
    with pytest.raises(ValidationError, match="empty string"):
        NormalisePolicy(volatile_patterns=("a*",))
    with pytest.raises(ValidationError, match="does not compile"):
        NormalisePolicy(volatile_patterns=("(",))


def test_tool_args_already_in_order_keep_the_clients_message() -> None:
    options = NormaliseOptions(canonical_tool_args=True)
    sorted_call = {"type": "tool_use", "id": "t1", "name": "search", "input": {"a": 2, "z": 1}}
    body = {**ANTHROPIC_BODY, "messages": [{"role": "assistant", "content": [sorted_call]}]}
    out = normalise("anthropic", body, options)
    assert out["messages"][0] is body["messages"][0]  # not copied, so not decoded again
    unsorted = {**sorted_call, "input": {"z": 1, "a": 2}}
    body = {**body, "messages": [{"role": "assistant", "content": [unsorted]}]}
    out = normalise("anthropic", body, options)
    assert json.dumps(out["messages"][0]["content"][0]["input"]) == '{"a": 2, "z": 1}'
