"""The router's prefix index is extended with each answer: the chain the pipeline hands the
fleet after a call is the one the session's next call starts with (OpenAI and Anthropic)."""

from __future__ import annotations

import asyncio
import json

from opentelemetry.sdk.trace import TracerProvider

from adapters.types import (
    ChatRequest,
    Message,
    StreamEnd,
    StreamStart,
    TextDelta,
    TextPart,
    ToolCallDelta,
    ToolCallStart,
    ToolUsePart,
    Usage,
)
from gateway.core.pipeline import Pipeline, PipelineParts
from gateway.core.prompt_cache import PromptCachePort
from gateway.core.stream_tally import StreamTally
from gateway.ports import Attempt, Candidate, ModelRoute
from gateway.telemetry import Metrics, Telemetry
from tests.cachekeys.test_gateway_prompt_cache import (
    ENCODER,
    SECRET,
    anthropic_body,
    prepare,
    tenant,
)
from tests.gateway.core.test_after_reply import Backend, Fakes, incoming

ANSWER = "I will read the file first, then run the tests again." * 6


def openai_body(history: list[dict]) -> dict:
    system = {"role": "system", "content": "You are a careful agent." + " rule" * 300}
    return {"model": "gpt-4o-mini", "max_tokens": 50, "messages": [system, *history]}


def test_openai_answer_chain_is_the_next_calls_prefix() -> None:
    WIRE = "openai"
    port = PromptCachePort(SECRET, encoder=ENCODER)
    first = [{"role": "user", "content": "Fix the failing test." + " a" * 200}]
    call = prepare(port, openai_body(first), tenant(), wire="openai")
    answer = Message("assistant", (TextPart(ANSWER),))
    chain = port.answer_hashes(WIRE, tenant(), call, answer)
    follow = [*first, {"role": "assistant", "content": ANSWER}, {"role": "user", "content": "go"}]
    after = prepare(port, openai_body(follow), tenant(), wire="openai")
    assert len(chain) > len(call.prefix_hashes)  # the answer adds blocks
    assert chain[: len(call.prefix_hashes)] == call.prefix_hashes
    assert after.prefix_hashes[: len(chain)] == chain


def test_anthropic_tool_use_answer_chain_is_the_next_calls_prefix() -> None:
    """The model streamed spaced JSON; the client echoes an object, decoded compact (and, by
    default, with its keys sorted: canonical_tool_args)."""
    WIRE = "anthropic"
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = anthropic_body(2)
    call = prepare(port, body, tenant())
    args = {"why": "see the second file" + " b" * 40, "p": 2}
    streamed = json.dumps(args, indent=1)  # spaced and split over lines, as a model may stream it
    answer = Message("assistant", (ToolUsePart("t2", "read", streamed),))
    chain = port.answer_hashes(WIRE, tenant(), call, answer)
    body["messages"] += [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t2", "name": "read", "input": args}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t2", "content": "ok"}],
        },
    ]
    after = prepare(port, body, tenant())
    assert len(chain) > len(call.prefix_hashes)
    assert after.prefix_hashes[: len(chain)] == chain


def test_openai_tool_call_answer_chain_is_the_next_calls_prefix() -> None:
    """The client echoes the model's arguments string; Lantern re-serialises it canonically."""
    port = PromptCachePort(SECRET, encoder=ENCODER)
    first = [{"role": "user", "content": "Fix the failing test." + " a" * 200}]
    call = prepare(port, openai_body(first), tenant(), wire="openai")
    arguments = '{"why": "see the file' + " b" * 40 + '", "p": 2}'
    answer = Message("assistant", (ToolUsePart("c1", "read", arguments),))
    chain = port.answer_hashes("openai", tenant(), call, answer)
    echoed = {"id": "c1", "type": "function", "function": {"name": "read", "arguments": arguments}}
    follow = [
        *first,
        {"role": "assistant", "content": None, "tool_calls": [echoed]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    ]
    after = prepare(port, openai_body(follow), tenant(), wire="openai")
    assert len(chain) > len(call.prefix_hashes)
    assert after.prefix_hashes[: len(chain)] == chain


def test_another_tenant_gets_another_chain() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    body = openai_body([{"role": "user", "content": "hello" + " a" * 100}])
    answer = Message("assistant", (TextPart(ANSWER),))
    acme_call = prepare(port, body, tenant("acme"), "openai")
    globex_call = prepare(port, body, tenant("globex"), "openai")
    acme = port.answer_hashes("openai", tenant("acme"), acme_call, answer)
    globex = port.answer_hashes("openai", tenant("globex"), globex_call, answer)
    assert set(acme).isdisjoint(globex)


def test_stream_tally_rebuilds_the_answer_in_block_order() -> None:
    tally = StreamTally("m", None, "acme")  # type: ignore[arg-type]
    for event in (
        StreamStart("r", "m"),
        TextDelta(0, "Let me "),
        TextDelta(0, "look."),
        ToolCallStart(1, "call_1", "read"),
        ToolCallDelta(1, '{"p":'),
        ToolCallDelta(1, "1}"),
        StreamEnd("tool_use", Usage(3, 4)),
    ):
        tally.see(event, 0.1)
    assert tally.answer() == Message(
        "assistant", (TextPart("Let me look."), ToolUsePart("call_1", "read", '{"p":1}'))
    )


class ExtendFakes(Fakes):
    """The pipeline's fake ports, with the two `_extend` uses, on a backend of a given venue."""

    def __init__(self, backend: Backend, venue: str) -> None:
        super().__init__(backend)
        self.route = ModelRoute("m", (Candidate(backend, "fake", venue),))  # type: ignore[arg-type]
        self.answers: list[tuple[str, Message]] = []
        self.extended: list[tuple[bytes, ...]] = []

    def answer_hashes(self, wire, tenant, prepared, answer: Message) -> tuple[bytes, ...]:  # type: ignore[no-untyped-def]
        self.answers.append((wire, answer))
        return (b"h%d" % len(self.answers),)

    def extend(self, attempt: Attempt, chain_hashes: tuple[bytes, ...]) -> None:
        self.extended.append(chain_hashes)


def run_both(venue: str) -> ExtendFakes:
    async def main() -> ExtendFakes:
        fakes = ExtendFakes(Backend(), venue)
        metrics = Telemetry(TracerProvider(), Metrics())
        pipeline = Pipeline(PipelineParts(fakes, fakes, fakes, fakes, fakes, fakes, fakes, metrics))  # type: ignore[arg-type]
        await pipeline.complete(await pipeline.admit(incoming()))
        assert fakes.extended == []  # after the reply, not before it
        async for _ in pipeline.stream(await pipeline.admit(incoming(stream=True))):
            pass
        await asyncio.sleep(0)
        return fakes

    return asyncio.run(main())


def test_pipeline_extends_selfhost_calls_with_their_answers() -> None:
    recorder = run_both("selfhost")
    assert recorder.answers == [
        ("openai", Message("assistant", (TextPart("hi there you"),))),  # complete
        ("openai", Message("assistant", (TextPart("hi"),))),  # stream
    ]
    assert recorder.extended == [(b"h1",), (b"h2",)]


def test_api_calls_are_not_put_in_the_replica_index() -> None:
    recorder = run_both("api")
    assert recorder.answers == [] and recorder.extended == []


def test_canonical_request_unchanged_by_the_answer() -> None:
    port = PromptCachePort(SECRET, encoder=ENCODER)
    call = prepare(port, openai_body([{"role": "user", "content": "hi"}]), tenant(), "openai")
    before = call.request
    port.answer_hashes("openai", tenant(), call, Message("assistant", (TextPart(ANSWER),)))
    assert call.request is before and isinstance(before, ChatRequest)
