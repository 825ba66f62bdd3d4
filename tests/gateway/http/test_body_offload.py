"""Large bodies are decoded in worker threads shared fairly between tenants: a tenant's flood
of them takes its own bound of threads, and another tenant's one large body is decoded at
once, while every one of the flood is still held; the table empties behind them."""

from __future__ import annotations

import threading

import anyio
import orjson
from anyio import wait_all_tasks_blocked
from starlette.requests import Request
from starlette.types import Message

from gateway.http.request_body import OFFLOADS_PER_TENANT, BodyLimits, read_object


def test_one_tenants_flood_of_large_bodies_leaves_threads_for_another() -> None:
    limits = BodyLimits.from_settings()
    started: list[str] = []
    go = threading.Event()

    def decode(tenant: str) -> str:  # stands for a large body's parse, held until `go`
        started.append(tenant)
        if tenant == "acme":
            assert go.wait(30)
        return tenant

    async def run() -> list[int]:
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(limits.offload.run, "acme", decode, "acme")
            await wait_all_tasks_blocked()
            in_flight = len(limits.offload.gate)
            assert await limits.offload.run("globex", decode, "globex") == "globex"
            go.set()  # globex was served while all twenty of acme's were held
        return [in_flight, len(limits.offload.gate)]

    assert anyio.run(run) == [1, 0]
    # acme's jobs started before globex's: at most its own bound, not all twenty
    assert started.index("globex") <= OFFLOADS_PER_TENANT
    assert started.count("acme") == 20


def test_a_large_body_is_parsed_in_a_worker_thread_and_leaves_nothing_held() -> None:
    limits = BodyLimits(max_bytes=1 << 20, max_depth=8, max_messages=10, offload_bytes=1024)
    raw = orjson.dumps({"model": "m", "input": "x" * 4096})

    async def run() -> tuple[dict[str, object], int, int]:
        sent = False

        async def receive() -> Message:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        request = Request({"type": "http", "method": "POST", "headers": []}, receive)
        body, num_bytes = await read_object(request, limits, "acme")
        return body, num_bytes, len(limits.offload.gate)

    body, num_bytes, num_tenants = anyio.run(run)
    assert body == {"model": "m", "input": "x" * 4096}
    assert (num_bytes, num_tenants) == (len(raw), 0)
