"""The large-call lane: a call whose body is over `http.offload_body_bytes` is prepared and
counted in a worker thread over the lane's own memos, with the same result as on the loop
(the reference path), before and after either side's memos are warm."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from pathlib import Path

from adapters.types import ChatRequest
from adapters.wire import openai as openai_wire
from gateway.core.measure_lane import MeasureLane, measure
from gateway.core.pipeline import IncomingCall, Pipeline
from gateway.core.token_count import TiktokenCounting
from gateway.ports import PreparedPrompt
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
