"""A failed step fails only the requests it held: the others (waiting, or not in that step) go on,
blocks are freed, and the async engine keeps serving."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from selfhost.engine.async_engine import AsyncEngine, EngineFailed
from selfhost.engine.llm_engine import LLMEngine, RequestOutput
from selfhost.engine.model_runner import ModelRunner
from selfhost.engine.scheduler import SchedulerOutput
from selfhost.engine.sequence import SamplingParams

PARAMS = SamplingParams(temperature=0.0, max_tokens=3, ignore_eos=True)


class FailingRunner(ModelRunner):
    """The real runner, except that a forward holding `doomed` raises."""

    def __init__(self, inner: ModelRunner, doomed: str) -> None:
        self.__dict__.update(inner.__dict__)
        self.doomed = doomed

    def execute(self, output: SchedulerOutput):  # type: ignore[no-untyped-def]
        if any(item.seq.request_id == self.doomed for item in output.scheduled):
            raise RuntimeError("forward failed")
        return super().execute(output)


@pytest.fixture
def engine(make_engine: Callable[..., LLMEngine]) -> LLMEngine:
    engine = make_engine(num_blocks=64, max_num_seqs=1)  # the second request waits
    engine.runner = FailingRunner(engine.runner, doomed="bad")
    return engine


def test_a_failed_forward_fails_its_request_only(
    engine: LLMEngine, chat_prompts: list[list[int]]
) -> None:
    engine.add_request("bad", chat_prompts[0], PARAMS)
    engine.add_request("good", chat_prompts[1], PARAMS)
    outputs: dict[str, list[RequestOutput]] = {}
    while engine.has_unfinished():
        for out in engine.step():
            outputs.setdefault(out.request_id, []).append(out)
    [bad] = outputs["bad"]
    assert bad.finished and bad.error == "RuntimeError('forward failed')"
    assert bad.new_token_ids == () and bad.finish_reason is None
    assert [out.error for out in outputs["good"]] == [None, None, None]
    assert outputs["good"][-1].finish_reason == "length"
    assert engine.scheduler.block_manager.usage == 0.0


def test_the_async_engine_fails_one_stream_and_keeps_serving(
    engine: LLMEngine, chat_prompts: list[list[int]]
) -> None:
    server = AsyncEngine(engine)

    async def tokens(request_id: str, prompt: list[int]) -> list[int] | str:
        try:
            return [
                t
                async for out in server.generate(request_id, prompt, PARAMS)
                for t in out.new_token_ids
            ]
        except EngineFailed as exc:
            return str(exc)

    async def run() -> list[list[int] | str]:
        return await asyncio.gather(tokens("bad", chat_prompts[0]), tokens("good", chat_prompts[1]))

    server.start()
    try:
        bad, good = asyncio.run(run())
        after = asyncio.run(tokens("after", chat_prompts[1]))
    finally:
        server.stop()
    assert bad == "engine step failed: RuntimeError('forward failed')"
    assert isinstance(good, list) and len(good) == 3
    assert after == good
