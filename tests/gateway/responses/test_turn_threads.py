"""A long conversation's `input_items` page, a large turn's translation and its encoding for the
store run on the door's per-tenant threads (the large-body ones): a tenant's flood of them takes its own
bound of threads, and another tenant's one still runs at once while all of the flood is held.
Counted by the jobs started, not timed."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import anyio
import pytest
from anyio import wait_all_tasks_blocked

from adapters.types import JSON
from adapters.wire.responses import ResponsesRequest
from gateway.core.tenant_gate import TenantThreads
from gateway.responses import turns as turns_module
from gateway.responses.input_items import ItemQuery, input_page
from gateway.responses.store import MemoryResponseStore, StoredResponse
from gateway.responses.turns import Prepared, Turn, Turns, decode_request, encode_turn, prepare
from policies.model import TenantPolicy

PER_TENANT = 2
ITEM = {"type": "message", "role": "user", "content": "spam spam spam"}
OUTPUT = {"id": "msg_out", "type": "message", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "ok", "annotations": []}]}  # fmt: skip
FLOOD = 20


def _stored(response_id: str) -> bytes:
    reply = {"id": response_id, "object": "response", "output": [OUTPUT]}
    return StoredResponse((ITEM, OUTPUT), reply).to_bytes()


def test_one_tenants_flood_of_long_pages_leaves_threads_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    go = threading.Event()

    def held(data: bytes, response_id: str, query: ItemQuery) -> dict[str, Any]:
        started.append(response_id)
        if response_id == "resp_acme":  # acme's pages are long: held until `go`
            assert go.wait(30)
        return input_page(data, response_id, query)

    monkeypatch.setattr(turns_module, "input_page", held)

    async def run() -> int:
        store = MemoryResponseStore(ttl_s=60, max_entries=10)
        for tenant in ("acme", "globex"):
            await store.put(tenant, f"resp_{tenant}", _stored(f"resp_{tenant}"))
        turns = Turns(store, max_items=100, offload_bytes=1)
        threads = TenantThreads(PER_TENANT, 8)
        async with anyio.create_task_group() as tg:
            for _ in range(FLOOD):
                tg.start_soon(turns.input_items, "acme", "resp_acme", ItemQuery(), threads)
            await wait_all_tasks_blocked()
            page = await turns.input_items("globex", "resp_globex", ItemQuery(), threads)
            go.set()  # globex was served while all of acme's were held
        return len(page["data"])

    assert anyio.run(run) == 1
    # acme's pages started before globex's: at most its own bound, not the whole flood
    assert started.index("resp_globex") <= PER_TENANT
    assert started.count("resp_acme") == FLOOD


def test_one_tenants_flood_of_large_turns_leaves_threads_for_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    go = threading.Event()

    def held(turn: Turn, reply: Mapping[str, Any]) -> bytes:
        tenant = turn.call.tenant.tenant
        started.append(tenant)
        if tenant == "acme":  # acme's turns are large: held until `go`
            assert go.wait(30)
        return encode_turn(turn, reply)

    monkeypatch.setattr(turns_module, "encode_turn", held)

    async def run() -> list[bool]:
        store = MemoryResponseStore(ttl_s=60, max_entries=FLOOD + 1)
        turns = Turns(store, max_items=100, offload_bytes=1)
        threads = TenantThreads(PER_TENANT, 8)
        body: dict[str, JSON] = {"model": "gpt-4o-mini", "input": "hi"}
        request = decode_request(body, 100)

        async def keep(tenant: str) -> str:
            policy = TenantPolicy(tenant=tenant)
            turn = await turns.begin(policy, "k1", body, request, None, 80, threads)
            reply = {"id": turn.response_id, "object": "response", "output": [OUTPUT]}
            await turns.remember(turn, reply, threads)
            return turn.response_id

        async with anyio.create_task_group() as tg:
            for _ in range(FLOOD):
                tg.start_soon(keep, "acme")
            await wait_all_tasks_blocked()
            kept = await keep("globex")
            is_kept = await store.get("globex", kept) is not None
            go.set()  # globex's turn was stored while all of acme's were held
        return [is_kept, len(threads.gate) == 0]

    assert anyio.run(run) == [True, True]
    assert started.index("globex") <= PER_TENANT
    assert started.count("acme") == FLOOD


def test_one_tenants_flood_of_large_turns_leaves_threads_for_their_translation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[str] = []
    go = threading.Event()

    def held(request: ResponsesRequest, stored: bytes | None, max_items: int) -> Prepared:
        started.append(request.model)
        if request.model == "acme-model":  # acme's turns are large: held until `go`
            assert go.wait(30)
        return prepare(request, stored, max_items)

    monkeypatch.setattr(turns_module, "prepare", held)

    async def run() -> tuple[str, int]:
        turns = Turns(MemoryResponseStore(ttl_s=60, max_entries=10), 100, offload_bytes=1)
        threads = TenantThreads(PER_TENANT, 8)

        async def begin(tenant: str) -> Turn:
            body: dict[str, JSON] = {"model": f"{tenant}-model", "input": "hi"}
            request = decode_request(body, 100)
            policy = TenantPolicy(tenant=tenant)
            return await turns.begin(policy, "k1", body, request, None, 80, threads)

        async with anyio.create_task_group() as tg:
            for _ in range(FLOOD):
                tg.start_soon(begin, "acme")
            await wait_all_tasks_blocked()
            turn = await begin("globex")
            go.set()  # globex's turn was translated while all of acme's were held
        return turn.call.request.model, len(threads.gate)

    assert anyio.run(run) == ("globex-model", 0)
    assert started.index("globex-model") <= PER_TENANT
    assert started.count("acme-model") == FLOOD
