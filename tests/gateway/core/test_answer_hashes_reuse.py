"""`answer_hashes` reuses the layout `prepare` made (hashing only the answer's blocks); the
reference path lays the whole extended prompt out again. Both must give the same chain: public
tools, a relocated volatile tail, tool calls and text answers, both wire formats."""

from __future__ import annotations

import dataclasses

import pytest

from adapters.types import Message, TextPart, ToolUsePart
from gateway.core.prompt_cache import PromptCachePort, PromptFacts
from gateway.ports import PreparedPrompt
from policies.model import TenantPolicy
from tests.cachekeys.test_gateway_prompt_cache import ENCODER, SECRET, anthropic_body, prepare
from tests.cachekeys.test_gateway_prompt_cache import tenant as make_tenant

TOOL = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Read a file." + " x" * 80,
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
ANSWERS = [
    Message("assistant", (TextPart("I will read it first." * 30),)),
    Message(
        "assistant",
        (TextPart("Reading."), ToolUsePart("t9", "read", '{"path": "a.py", "why": "' + "b " * 40)),
    ),
]


def openai_body() -> dict:
    return {
        "model": "gpt-4o-mini",
        "tools": [TOOL],
        "messages": [
            {"role": "system", "content": "Now 2026-11-30T10:00:00Z. Rules:" + " rule" * 400},
            {"role": "user", "content": "Fix the failing test." + " a" * 300},
        ],
    }


def without_layout(call: PreparedPrompt) -> PreparedPrompt:
    facts = call.diagnosis
    assert isinstance(facts, PromptFacts) and facts.layout is not None
    return dataclasses.replace(call, diagnosis=dataclasses.replace(facts, layout=None))


def policies() -> list[TenantPolicy]:
    return [
        make_tenant(),
        make_tenant(normalise={"relocate_volatile": True}),
        make_tenant(public_prefixes=[{"tool": "read"}]),
    ]


@pytest.mark.parametrize("answer", ANSWERS)
@pytest.mark.parametrize("policy", policies(), ids=["plain", "volatile", "public-tool"])
@pytest.mark.parametrize("wire", ["openai", "anthropic"])
def test_reused_layout_gives_the_reference_chain(
    wire: str, policy: TenantPolicy, answer: Message
) -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = openai_body() if wire == "openai" else anthropic_body(2)
    call = prepare(port, body, policy, wire=wire)
    fast = port.answer_hashes(wire, policy, call, answer)  # type: ignore[arg-type]
    reference = PromptCachePort(SECRET, encoder=ENCODER)  # a fresh memo: nothing carried over
    slow = reference.answer_hashes(wire, policy, without_layout(call), answer)  # type: ignore[arg-type]
    assert fast == slow
    assert len(fast) > len(call.prefix_hashes)  # the answer added blocks


def test_the_volatile_tail_is_left_out_of_the_chain() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    policy = make_tenant(normalise={"relocate_volatile": True})
    call = prepare(port, openai_body(), policy, wire="openai")
    facts = call.diagnosis
    assert isinstance(facts, PromptFacts) and facts.layout is not None
    assert any(b.is_volatile for b in facts.layout.blocks)  # the timestamp was relocated
    chain = port.answer_hashes("openai", policy, call, ANSWERS[0])
    assert chain[: len(call.prefix_hashes)] == call.prefix_hashes
