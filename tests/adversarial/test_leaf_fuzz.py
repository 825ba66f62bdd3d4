"""Every field of every door, replaced by every kind of JSON value, is a 4xx or a reply, never a
5xx: a real gateway in front of the wire-level fakes, a valid body per door, and each of its
fields and leaves (containers included) swapped in turn for an object, an array, strings with
control characters, numbers past 64 bits, booleans and null. Deterministic: no randomness."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tests.adversarial.edge_proc import ECHO_TOOL
from tests.e2e.conftest import models_for
from tests.e2e.harness import RunningGateway, start_gateway, write_config, write_policy
from tests.fakes.embeddings import FakeEmbeddings
from tests.fakes.upstream import FakeUpstream

KEY = "lt-fuzz-acme-key-00001"
EMBED = "text-embedding-3-small"
HOSTILE: tuple[Any, ...] = (
    {},
    {"type": {"a": [1]}},
    [],
    [{}],
    [[None]],
    "",
    "\x00\x1b[31m\r\n\u202e\ud7ff",
    "x" * 300,
    0,
    -1,
    1.5,
    10**30,
    -(10**40),
    1e308,
    True,
    False,
    None,
)
USER_TEXT = [{"type": "text", "text": "hi"}]
CHAT = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ],
    "tools": [
        {
            "type": "function",
            "function": {"name": "f", "description": "d", "parameters": {"type": "object"}},
        }
    ],
    "tool_choice": "auto",
    "max_tokens": 8,
    "temperature": 0.5,
    "top_p": 1,
    "stop": ["zz"],
    "user": "u-1",
    "metadata": {"k": "v"},
    "prompt_cache_key": "pk",
    "response_format": {"type": "json_object"},
}
MESSAGES = {
    "model": "claude-sonnet-4-5",
    "max_tokens": 8,
    "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
    "messages": [
        {"role": "user", "content": USER_TEXT},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ],
    "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "auto"},
    "temperature": 0.5,
    "stop_sequences": ["zz"],
    "metadata": {"user_id": "u-1"},
}
COUNT = {k: v for k, v in MESSAGES.items() if k not in ("max_tokens", "temperature")}
EMBEDDINGS = {"model": EMBED, "input": ["a b", "c"], "encoding_format": "float", "user": "u-1"}
RESPONSES = {
    "model": "gpt-4o-mini",
    "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
    ],
    "instructions": "be brief",
    "tools": [{"type": "function", "name": "f", "description": "d", "parameters": {}}],
    "tool_choice": "auto",
    "max_output_tokens": 16,
    "temperature": 0.5,
    "top_p": 1,
    "text": {"format": {"type": "json_schema", "name": "n", "schema": {"type": "object"}}},
    "store": True,
    "metadata": {"k": "v"},
    "parallel_tool_calls": True,
    "reasoning": {"effort": "low"},
    "user": "u-1",
    "prompt_cache_key": "pk",
    "include": ["reasoning.encrypted_content"],
    "truncation": "disabled",
}
TOOL_RUN = {"tool": "echo", "limits": {"wall_s": 5}, "tool_call_id": "c"}
DOORS = {
    "/v1/chat/completions": CHAT,
    "/v1/messages": MESSAGES,
    "/v1/messages/count_tokens": COUNT,
    "/v1/embeddings": EMBEDDINGS,
    "/v1/responses": RESPONSES,
    "/v1/tools/runs": TOOL_RUN,
}
# path parameters: ids that are not ids (JSON of every type, as text, and broken text)
IDS = ("{}", "[]", "null", "1e999", "true", "%00", "%1b%5b", "..%2F..", "x" * 3000, "%ff%fe")


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    var = tmp_path_factory.mktemp("fuzz")
    (var / "policies").mkdir()
    models = ["gpt-4o-mini", "claude-sonnet-4-5", EMBED]
    write_policy(var / "policies", "acme", KEY, models=models, tools=[ECHO_TOOL])
    with FakeUpstream() as upstream, FakeEmbeddings() as embeddings:
        embed = {"kind": "openai_compatible", "name": "fake-embed", "base_url": embeddings.base_url}
        routes = [
            *models_for(upstream)[:2],
            {"name": EMBED, "backends": [{**embed, "model": "te3"}]},
        ]
        prices = {EMBED: {"input": 0.02, "output": 0.0}}
        # no periodic probes: the embeddings fake serves embeddings only
        fleet = {"health_interval_s": 3600, "signal_interval_s": 0}
        config = write_config(var / "lantern.yaml", var, routes, prices=prices, fleet=fleet)
        running = start_gateway(config)
        try:
            yield running
        finally:
            running.stop()


def paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every field and leaf of a JSON document, containers before what they hold."""
    if at:
        yield at
    if isinstance(value, dict | list):
        children = value.items() if isinstance(value, dict) else enumerate(value)
        for key, child in children:
            yield from paths(child, (*at, key))


def replaced(doc: Any, at: tuple[Any, ...], new: Any) -> Any:
    out = json.loads(json.dumps(doc))
    holder = out
    for key in at[:-1]:
        holder = holder[key]
    holder[at[-1]] = new
    return out


def mutants(doc: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    for at in paths(doc):
        for value in HOSTILE:
            yield f"{at} = {value!r:.40}", json.dumps(replaced(doc, at, value)).encode()
    yield "no fields", b"{}"
    for value in HOSTILE:
        yield f"body = {value!r:.40}", json.dumps(value).encode()


@pytest.mark.parametrize("door", DOORS)
def test_no_value_in_any_field_is_a_server_error(gw: RunningGateway, door: str) -> None:
    headers = {"authorization": f"Bearer {KEY}", "content-type": "application/json"}
    failed: list[str] = []
    with httpx.Client(base_url=gw.url, headers=headers, timeout=60) as client:
        seed = client.post(door, json=DOORS[door], headers={"idempotency-key": f"{door}-seed"})
        assert seed.status_code == 200, seed.text  # the mutants start from a served call
        for n, (case, body) in enumerate(mutants(DOORS[door])):
            reply = client.post(door, content=body, headers={"idempotency-key": f"{door}-m{n}"})
            if reply.status_code >= 500:
                failed.append(f"{case} -> {reply.status_code} {reply.text[:200]}")
    assert failed == []


def test_no_id_is_a_server_error(gw: RunningGateway) -> None:
    headers = {"authorization": f"Bearer {KEY}"}
    failed: list[str] = []
    with httpx.Client(base_url=gw.url, headers=headers, timeout=60) as client:
        for raw in IDS:
            for method, path in (
                ("GET", "/v1/responses/"),
                ("DELETE", "/v1/responses/"),
                ("GET", "/v1/tools/runs/"),
            ):
                reply = client.request(method, path + raw)
                if reply.status_code >= 500:
                    failed.append(f"{method} {path}{quote(raw[:40])} -> {reply.status_code}")
    assert failed == []
