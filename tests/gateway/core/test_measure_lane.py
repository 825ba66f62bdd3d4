"""The large-call lane: a call whose body is over `http.offload_body_bytes` is prepared and
counted in a worker thread over the lane's own memos, with the same result as on the loop
(the reference path), before and after either side's memos are warm."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path
from typing import Any, cast

import anyio
from anyio import wait_all_tasks_blocked

from adapters.types import ChatRequest
from adapters.wire import openai as openai_wire
from gateway.core.measure_lane import MeasureLane, measure
from gateway.core.pipeline import IncomingCall, Pipeline
from gateway.core.token_count import TiktokenCounting
from gateway.ports import PreparedPrompt, PromptPort, TokenCounting
from gateway.settings import load_settings
from gateway.wiring import build_components
from policies.model import TenantPolicy

BODY = {
    "model": "gpt-4o-mini",
    "messages": [
        {"role": "system", "content": "You are terse. " * 40},
        {"role": "user", "content": "Summarise the ledger for 2026-12-01 please. " * 30},
        {"role": "assistant", "content": "The ledger holds 41 rows."},
        {"role": "user", "content": "And the cache hit ratio?"},
    ],
    "tools": [
        {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    ],
}


class ThreadRecordingCounter(TiktokenCounting):
    def __init__(self) -> None:
        super().__init__()
        self.threads: list[int] = []

    def count_prompt(self, request: ChatRequest, scope: str = "") -> int:
        self.threads.append(threading.get_ident())
        return super().count_prompt(request, scope)


def test_the_lane_measures_in_a_thread_what_the_loop_measures(tmp_path: Path) -> None:
    settings = load_settings(
        None,
        var_dir=str(tmp_path),
        database_url=f"sqlite:///{tmp_path}/ledger.db",
        policy_dir=str(tmp_path),
        server_secret="lane-secret",
    )
    services = build_components(settings).pipeline.s
    lane = services.measure_lane
    assert isinstance(lane, MeasureLane)
    assert lane.min_body_bytes == 256 * 1024  # settings.http.offload_body_bytes
    recorder = ThreadRecordingCounter()
    recording = MeasureLane(lane.prompts, recorder, lane.min_body_bytes)
    pipeline = Pipeline(dataclasses.replace(services, measure_lane=recording))
    request = openai_wire.decode_request(BODY)
    tenant = TenantPolicy(tenant="acme")

    def call(body_bytes: int) -> IncomingCall:
        return IncomingCall("openai", tenant, "k1", request, BODY, None, body_bytes=body_bytes)

    async def measure_all() -> list[tuple[PreparedPrompt, int]]:
        small, large = call(100), call(lane.min_body_bytes)
        s = pipeline.s
        return [
            await measure(s.prompts, s.counter, s.measure_lane, c, "gpt-4o-mini")
            for c in (small, large, small, large)
        ]

    results = asyncio.run(measure_all())
    assert results[0][1] == pipeline.s.counter.count_prompt(results[0][0].request, tenant.tenant)
    assert all(r == results[0] for r in results[1:])
    assert len(recorder.threads) == 2  # the two large calls, off the main thread
    assert threading.get_ident() not in recorder.threads


class PlainPrompts:
    """A prompt port that edits nothing (the lane's order is under test, not preparation)."""

    def prepare(
        self, wire: str, body: Any, request: ChatRequest, tenant: TenantPolicy, model: str
    ) -> PreparedPrompt:
        return PreparedPrompt(body, request, "root", "salt")


class HeldCounter:
    """Records the tenant of each count in the order the lane runs them; the first count holds
    the lane until `go` is set, so that every other large call queues behind it."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.go = threading.Event()

    def count_prompt(self, request: ChatRequest, scope: str) -> int:
        self.order.append(scope)
        if len(self.order) == 1:
            assert self.go.wait(30)
        return len(self.order)


def test_one_tenants_flood_of_large_calls_does_not_queue_anothers_behind_it() -> None:
    """acme sends 20 large calls; globex's one, sent after all of them, is counted second
    (acme's first holds the lane), not twenty-first; and the lane's table empties."""
    counter = HeldCounter()
    lane = MeasureLane(cast(PromptPort, PlainPrompts()), cast(TokenCounting, counter), 1000)
    request = openai_wire.decode_request(BODY)

    def call(tenant: str) -> IncomingCall:
        return IncomingCall("openai", TenantPolicy(tenant=tenant), "k", request, BODY, None, 1000)

    async def flood() -> list[int]:
        async def one(tenant: str) -> None:
            await measure(lane.prompts, lane.counter, lane, call(tenant), "gpt-4o-mini")

        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one, "acme")
                await wait_all_tasks_blocked()  # each acme call is waiting before the next
            tg.start_soon(one, "globex")
            await wait_all_tasks_blocked()
            num_in_flight = len(lane.threads.gate)
            counter.go.set()
        return [num_in_flight, len(lane.threads.gate)]

    table_sizes = anyio.run(flood)
    assert counter.order[:3] == ["acme", "globex", "acme"]
    assert counter.order.count("acme") == 20
    assert table_sizes == [2, 0]  # one entry per tenant in flight; none once idle


def test_a_large_call_cancelled_while_waiting_gives_its_place_back() -> None:
    """A client that goes away while its large call waits for the lane leaves nothing behind:
    the next call is counted, and the table is empty once the lane is idle."""
    counter = HeldCounter()
    lane = MeasureLane(cast(PromptPort, PlainPrompts()), cast(TokenCounting, counter), 1000)
    request = openai_wire.decode_request(BODY)

    def call(tenant: str) -> IncomingCall:
        return IncomingCall("openai", TenantPolicy(tenant=tenant), "k", request, BODY, None, 1000)

    async def run() -> None:
        async def one(tenant: str) -> None:
            await measure(lane.prompts, lane.counter, lane, call(tenant), "gpt-4o-mini")

        async with anyio.create_task_group() as tg:
            tg.start_soon(one, "acme")
            await wait_all_tasks_blocked()
            with anyio.CancelScope() as gone:
                gone.cancel()
                await one("globex")  # cancelled while it waits: the client went away
            assert len(lane.threads.gate) == 1  # acme's, still held; globex's place is gone
            counter.go.set()
        assert len(lane.threads.gate) == 0
        await one("globex")

    anyio.run(run)
    assert counter.order == ["acme", "globex"]
