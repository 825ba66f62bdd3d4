"""Through a real gateway with the default cache policy: a value of no known shape that changes
between calls, in the system prompt, in a tool's description or in a description in its
parameters' schema, is learnt on both doors and on
the translated route (OpenAI door to an Anthropic backend). The session that teaches the place
keeps its first value in place and names the newest at the tail (its prefix is read, not
written again); the tenant's next session relocates the place from its first call. Every value
reaches the model."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.cachekeys.test_gateway_e2e import KEY, MODEL, stack  # noqa: F401 (the fixture)
from tests.e2e.harness import RunningGateway
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

SYSTEM = "Follow the rules. Build {} of the workspace is checked out." + " rule" * 1200
DESCRIPTION = "Search the index of the workspace (index generation {} of the search store)."
QUERY = "Words to look for; the index holds generation {} of the workspace."


def _schema(build: int) -> dict[str, Any]:
    query = {"type": "string", "description": QUERY.format(build)}
    return {"type": "object", "properties": {"query": query, "limit": {"type": "integer"}}}


def _body(route: str, task: str, turns: int, build: int, where: str) -> dict[str, Any]:
    system = SYSTEM.format(build if where == "system" else 7)
    description = DESCRIPTION.format(build if where == "tool" else 7)
    schema = _schema(build if where == "parameter" else 7)
    history: list[dict[str, Any]] = [{"role": "user", "content": task + " a" * 300}]
    for t in range(1, turns):  # plain text turns: the same on both wires
        history += [
            {"role": "assistant", "content": f"Step {t} done."},
            {"role": "user", "content": f"Go on with step {t + 1}." + " b" * 200},
        ]
    if route == "anthropic":
        tool = {"name": "search", "description": description, "input_schema": schema}
        return {
            "model": MODEL,
            "max_tokens": 20,
            "system": system,
            "tools": [tool],
            "messages": history,
        }
    function = {"name": "search", "description": description, "parameters": schema}
    return {
        "model": "gpt-4o" if route == "openai" else MODEL,
        "max_tokens": 20,
        "tools": [{"type": "function", "function": function}],
        "messages": [{"role": "system", "content": system}, *history],
    }


def _sent_text(sent: dict[str, Any]) -> tuple[str, str]:
    """What the model reads of the system prompt and the tool, and the last turn's text."""
    tool = sent["tools"][0]
    tool = tool.get("function", tool)
    schema = tool.get("input_schema") or tool["parameters"]
    head = [tool["description"], schema["properties"]["query"]["description"]]
    system = sent.get("system")
    if system is None:  # OpenAI: the leading system message
        system = sent["messages"][0]["content"]
    head += [system] if isinstance(system, str) else [p["text"] for p in system]
    last = sent["messages"][-1]["content"]
    tail = last if isinstance(last, str) else "".join(p.get("text", "") for p in last)
    return "\n".join(head), tail


def _post(client: httpx.Client, route: str, body: dict[str, Any]) -> httpx.Response:
    if route == "anthropic":
        reply = client.post("/v1/messages", json=body, headers={"x-api-key": KEY})
    else:
        auth = {"authorization": f"Bearer {KEY}"}
        reply = client.post("/v1/chat/completions", json=body, headers=auth)
    assert reply.status_code == 200, reply.text
    return reply


@pytest.mark.parametrize("where", ["system", "tool", "parameter"])
@pytest.mark.parametrize("route", ["anthropic", "openai", "openai-to-anthropic"])
def test_a_changing_value_is_learnt_and_every_value_reaches_the_model(
    stack: tuple[RunningGateway, FakeUpstream, PromptCacheFake],  # noqa: F811
    route: str,
    where: str,
) -> None:
    gateway, upstream, _ = stack
    with httpx.Client(base_url=gateway.url, timeout=30.0) as client:
        headers, sent = [], []
        for t in range(3):
            reply = _post(client, route, _body(route, "Fix the test.", t + 1, 48213 + t, where))
            headers.append(reply.headers["x-lantern-cache"])
            sent.append(_sent_text(upstream.requests[-1].json()))
        assert headers[0].startswith("first_call; prefix=")
        # call 1 teaches the place; it and call 2 keep call 0's value: the prefix is kept
        assert [h.split(";")[0] for h in headers[1:]] == ["kept", "kept"]
        assert all("relocated=learned" in h for h in headers[1:])
        for t in (1, 2):
            head, tail = sent[t]
            assert "48213 of" in head and f"{48213 + t}" not in head
            assert f", 48213 is now {48213 + t}" in tail  # the newest value reaches the model
        later = _post(client, route, _body(route, "Review the change.", 1, 50000, where))
        head, tail = _sent_text(upstream.requests[-1].json())
    assert later.headers["x-lantern-cache"].startswith("first_call; relocated=learned; ")
    assert "{{volatile:1}} of" in head and "50000" not in head
    assert "{{volatile:1}} = 50000" in tail
