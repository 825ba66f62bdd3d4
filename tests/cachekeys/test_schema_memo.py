"""`SchemaMemo` and `ToolListsMemo` (the fast paths) give exactly what `canonical_schema` and
normalising afresh (the references) give, on wire bodies and the typed requests read back,
first call and memoised calls alike."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import orjson

from adapters.types import WireFormat
from adapters.wire import anthropic as anthropic_wire
from adapters.wire import openai as openai_wire
from cachekeys.canonical import SchemaMemo, canonical_schema, canonical_tool, order_tools
from cachekeys.normalise import (
    NormaliseOptions,
    PublicPrefix,
    normalise,
    normalise_edits,
)
from cachekeys.relocation import relocate
from tests.cachekeys.conftest import agent_request, normalised, tool

SCHEMAS = [
    {"type": "object", "required": ["z", "a"], "properties": {"z": {"enum": ["b", "a"]}}},
    {"required": ["a", "z"], "type": "object", "properties": {"z": {"enum": ["b", "a"]}}},
    {"type": "object", "properties": {"n": {"type": "number", "default": 1.0}}},
    {"type": "object", "properties": {"n": {"type": "number", "default": 1}}},
    {"anyOf": [{"type": "string"}, {"type": "null"}], "required": [1, "a"]},
    {"big": 2**70, "required": ["b", "a"]},  # not plain JSON for the memo's key: no memo
    [],
    "leaf",
]


def test_memo_equals_reference_first_and_memoised() -> None:
    memo = SchemaMemo(max_entries=3)  # small: the bound is crossed too
    for _ in range(3):
        for schema in SCHEMAS:
            got, want = memo.canonical(schema), canonical_schema(schema)
            assert got == want
            assert json.dumps(got) == json.dumps(want)  # key order and int/float kept


def test_normalise_with_memo_equals_without() -> None:
    plain, memoised = NormaliseOptions(), NormaliseOptions(schemas=SchemaMemo())
    request = agent_request(tools=("search", "edit", "ask"))
    body = openai_wire.encode_request(request)
    for _ in range(2):
        assert normalised(request, memoised) == normalised(request, plain)
        got, want = normalise("openai", body, memoised), normalise("openai", body, plain)
        assert json.dumps(got) == json.dumps(want)


def test_a_schema_past_the_byte_bound_is_not_kept_and_the_bound_holds() -> None:
    memo = SchemaMemo(max_bytes=200)
    big = {"type": "object", "description": "x" * 300}
    assert memo.canonical(big) == canonical_schema(big)
    assert memo.canonical(big) is not memo.canonical(big)  # never kept
    small = [{"type": "object", "description": f"{n}" * 30} for n in range(4)]
    kept = [memo.canonical(s) for s in small]  # 64 bytes each: 3 fit, the 4th starts afresh
    assert memo.canonical(small[3]) is kept[3] and memo.canonical(small[0]) is not kept[0]
    assert memo.canonical(small[0]) is memo.canonical(small[0])


def _afresh(wire: WireFormat, body: dict[str, Any], options: NormaliseOptions) -> tuple[Any, ...]:
    """Tools normalised and relocated step by step with no memo (the reference; the bodies
    here hold no tool-call history)."""
    out = dict(body)
    tools = (
        [canonical_tool(wire, t) for t in out["tools"]] if options.canonical_json else out["tools"]
    )
    out["tools"] = (
        order_tools(wire, tools, options.is_public_tool) if options.order_tools else tools
    )
    relocated: tuple[str, ...] = ()
    if options.relocate_volatile:
        out, relocated = relocate(wire, out, options.volatile)
    return out, relocated


def test_tool_lists_memo_equals_normalising_afresh_on_every_call() -> None:
    public = PublicPrefix(tool_names=frozenset({"edit"}))
    dated = tool("ask", "Asked at 2026-11-30T09:18:42Z by the user")  # relocated: not clean
    request = replace(agent_request(tools=("search", "edit")), tools=(tool("zeta"), dated))
    request = replace(request, tools=(*request.tools, *agent_request(tools=("b", "a")).tools))
    for options in (
        NormaliseOptions(schemas=SchemaMemo(), public=public),
        NormaliseOptions(schemas=SchemaMemo(), relocate_volatile=False),
        NormaliseOptions(order_tools=False),
    ):
        wires: tuple[WireFormat, ...] = ("openai", "anthropic")
        for wire in wires:
            codec = openai_wire if wire == "openai" else anthropic_wire
            body = codec.encode_request(request)
            if wire == "anthropic":  # a client marker on the tools level moves with the order
                body["tools"][0]["cache_control"] = {"type": "ephemeral", "ttl": "1h"}
            for _ in range(3):
                got = normalise_edits(wire, orjson.loads(orjson.dumps(body)), options)
                want, relocated = _afresh(wire, body, options)
                assert orjson.dumps(got[0]) == orjson.dumps(want)
                assert got[1].relocated == relocated
                assert relocated == (("iso_datetime",) if options.relocate_volatile else ())
            again = normalise(wire, body, options)["tools"]
            assert again is not normalise(wire, body, options)["tools"]  # a list of its own
