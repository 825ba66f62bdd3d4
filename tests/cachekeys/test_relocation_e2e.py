"""Through a real gateway with the default cache policy: a relocated prompt still carries every
value to the model, on both doors and on the translated route (OpenAI door to an Anthropic
backend); the placeholders put back from the tail give the client's text exactly."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.cachekeys.test_gateway_e2e import KEY, MODEL, stack  # noqa: F401 (the fixture)
from tests.e2e.harness import RunningGateway
from tests.fakes.prompt_cache import PromptCacheFake
from tests.fakes.upstream import FakeUpstream

VALUES = (
    "2026-11-30T09:18:42Z",  # ISO date-time
    "17:05",  # clock time
    "123e4567-e89b-12d3-a456-426614174000",  # UUID
    "req_8f3k2m9x1q",  # request id
    "1764494322",  # epoch seconds
)
SYSTEM = (
    (
        "You are Acme's agent. Now {}, local {}. Session {}, request {}, at {}. "
        "Today is 2026-11-30."  # a date alone stays where it is
    ).format(*VALUES)
    + " Rules."
    + " r" * 1200
)
TOOL_DESCRIPTION = "Search the index (trace trace_a1b2c3d4e5 pinned)."


def _put_back(text: str, tail: str) -> str:
    values = dict(re.findall(r"^(\{\{volatile:\d+\}\}) = (.*)$", tail, re.MULTILINE))
    return re.sub(r"\{\{volatile:\d+\}\}", lambda m: values[m.group(0)], text)


def _anthropic_body() -> dict:
    return {
        "model": MODEL,
        "max_tokens": 20,
        "system": SYSTEM,
        "tools": [
            {
                "name": "search",
                "description": TOOL_DESCRIPTION,
                "input_schema": {"type": "object", "properties": {}},
            }
        ],
        "messages": [{"role": "user", "content": "Refund order 1182."}],
    }


def _openai_body(model: str) -> dict:
    tool = {
        "type": "function",
        "function": {
            "name": "search",
            "description": TOOL_DESCRIPTION,
            "parameters": {"type": "object", "properties": {}},
        },
    }
    return {
        "model": model,
        "max_tokens": 20,
        "tools": [tool],
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Refund order 1182."},
        ],
    }


def _anthropic_sent(sent: dict) -> tuple[str, str, str]:
    system = sent["system"] if isinstance(sent["system"], str) else sent["system"][0]["text"]
    tail = sent["messages"][-1]["content"][-1]["text"]
    return system, sent["tools"][0]["description"], tail


def _openai_sent(sent: dict) -> tuple[str, str, str]:
    system = sent["messages"][0]["content"]
    system = system if isinstance(system, str) else system[0]["text"]
    tail = sent["messages"][-1]["content"][-1]["text"]
    return system, sent["tools"][0]["function"]["description"], tail


@pytest.mark.parametrize("route", ["anthropic", "openai", "openai-to-anthropic"])
def test_a_relocated_prompt_carries_every_value_to_the_model(
    stack: tuple[RunningGateway, FakeUpstream, PromptCacheFake],  # noqa: F811
    route: str,
) -> None:
    gateway, upstream, _ = stack
    with httpx.Client(base_url=gateway.url, timeout=30.0) as client:
        if route == "anthropic":
            reply = client.post("/v1/messages", json=_anthropic_body(), headers={"x-api-key": KEY})
        else:
            model = "gpt-4o" if route == "openai" else MODEL
            reply = client.post(
                "/v1/chat/completions",
                json=_openai_body(model),
                headers={"authorization": f"Bearer {KEY}"},
            )
    assert reply.status_code == 200, reply.text
    sent = upstream.requests[-1].json()
    system, description, tail = (_openai_sent if route == "openai" else _anthropic_sent)(sent)
    assert tail.startswith("<volatile-context>\n")
    for value in VALUES:
        assert value not in system and value in tail
    assert "Today is 2026-11-30." in system  # dates alone follow the policy
    assert _put_back(system, tail) == SYSTEM
    scope = re.match(r"\[cache scope [0-9a-f]{16}\]\n", description)  # tenant isolation
    assert scope is not None
    assert _put_back(description[scope.end() :], tail) == TOOL_DESCRIPTION
    assert reply.headers["x-lantern-cache"].startswith(
        "first_call; relocated=clock_time,epoch,iso_datetime,request_id,uuid; "
    )
