"""Keeping an answered turn: what is stored (the conversation so far, its ids, the reply), and a
large turn's conversation encoded in a worker thread, off the loop that serves other tenants
(the same size rule as reading it: body and stored conversation together)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from adapters.types import JSON
from gateway.core.tenant_gate import TenantThreads
from gateway.responses import turns as turns_module
from gateway.responses.errors import ResponseNotFound
from gateway.responses.store import MemoryResponseStore, StoredResponse
from gateway.responses.turns import Turn, Turns, decode_request, encode_turn
from policies.model import TenantPolicy

ITEM = {"type": "message", "role": "user", "content": "spam spam spam"}
OUTPUT = {"id": "msg_out", "type": "message", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "ok", "annotations": []}]}  # fmt: skip
EARLIER = StoredResponse(
    (ITEM, OUTPUT), {"id": "resp_first", "object": "response", "output": [OUTPUT]}
)


def _kept(offload_bytes: int, monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], Any]:
    """For each turn kept: whether it was encoded on the loop's thread; and what the store
    then holds for the continuing turn."""
    on_loop: list[bool] = []
    loop_thread: list[int] = []

    def recorded(turn: Turn, reply: Mapping[str, Any]) -> bytes:
        on_loop.append(threading.get_ident() == loop_thread[0])
        return encode_turn(turn, reply)

    monkeypatch.setattr(turns_module, "encode_turn", recorded)

    async def main() -> StoredResponse | None:
        loop_thread.append(threading.get_ident())
        store = MemoryResponseStore(ttl_s=60, max_entries=10)
        await store.put("acme", "resp_first", EARLIER.to_bytes())
        turns = Turns(store, max_items=100, offload_bytes=offload_bytes)
        body: dict[str, JSON] = {
            "model": "gpt-4o-mini",
            "input": "more",
            "previous_response_id": "resp_first",
        }
        request = decode_request(body, 100)
        tenant = TenantPolicy(tenant="acme")
        threads = TenantThreads(2, 8)
        num_bytes = len(orjson.dumps(body))
        turn = await turns.begin(tenant, "k1", body, request, None, num_bytes, threads)
        answer = {**OUTPUT, "id": "msg_second"}
        reply = {"id": turn.response_id, "object": "response", "output": [answer]}
        await turns.remember(turn, reply, threads)
        return await store.get("acme", turn.response_id)

    return on_loop, asyncio.run(main())


def test_a_large_turn_is_encoded_in_a_worker_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    num_bytes = len(EARLIER.to_bytes()) + len(
        orjson.dumps(
            {"model": "gpt-4o-mini", "input": "more", "previous_response_id": "resp_first"}
        )
    )
    small, kept_small = _kept(num_bytes + 1, monkeypatch)
    large, kept_large = _kept(num_bytes, monkeypatch)
    assert (small, large) == ([True], [False])
    more = {"type": "message", "role": "user", "content": "more"}
    for kept in (kept_small, kept_large):
        assert kept is not None
        assert kept.conversation == (ITEM, OUTPUT, more, {**OUTPUT, "id": "msg_second"})
        suffix = kept.response["id"].removeprefix("resp_")
        assert kept.item_ids == ("msg_first_in0", "msg_out", f"msg_{suffix}_in2", "msg_second")


@pytest.mark.parametrize("reply_id", [None, "", 7, "resp_" + "x" * 252])
def test_a_reply_without_an_id_get_could_name_is_served_unstored(reply_id: object) -> None:
    """A native upstream's reply carries its own id, or none: one that `GET` could never name
    is not stored (the client keeps its answer), never a 500."""

    async def main() -> int:
        store = MemoryResponseStore(ttl_s=60, max_entries=10)
        turns = Turns(store, max_items=100, offload_bytes=1 << 20)
        body: dict[str, JSON] = {"model": "gpt-4o-mini", "input": "hi"}
        request = decode_request(body, 100)
        threads = TenantThreads(2, 8)
        acme = TenantPolicy(tenant="acme")
        turn = await turns.begin(acme, "k1", body, request, None, 40, threads)
        reply = {"object": "response", "output": [OUTPUT]}
        await turns.remember(
            turn, reply if reply_id is None else {**reply, "id": reply_id}, threads
        )
        await turns.remember(turn, {**reply, "id": "resp_" + "x" * 251}, threads)  # longest named
        return len(store)

    assert asyncio.run(main()) == 1


class HeldStore(MemoryResponseStore):
    """The in-process store, whose reads of `held`'s conversations wait for `release` (a slow
    Redis answering a long one); every read is recorded."""

    def __init__(self, held: str) -> None:
        super().__init__(ttl_s=60, max_entries=10)
        self.held = held
        self.release = asyncio.Event()
        self.reads: list[str] = []

    async def get_bytes(self, tenant: str, response_id: str) -> bytes | None:
        self.reads.append(tenant)
        if tenant == self.held:
            await self.release.wait()
        return await super().get_bytes(tenant, response_id)


def test_a_tenants_continuations_wait_for_its_own_reads_only() -> None:
    """With one read per tenant: acme's second continuation waits for its first (held by a
    slow read), globex's goes straight through; the gate's table empties behind them, also
    after a continuation of an id that is not there."""

    async def main() -> None:
        store = HeldStore("acme")
        for tenant in ("acme", "globex"):
            await store.put(tenant, "resp_first", EARLIER.to_bytes())
        turns = Turns(store, max_items=100, offload_bytes=1 << 20, reads_per_tenant=1)
        body: dict[str, JSON] = {
            "model": "gpt-4o-mini",
            "input": "more",
            "previous_response_id": "resp_first",
        }
        request = decode_request(body, 100)
        threads = TenantThreads(2, 8)

        def begin(tenant: str) -> Any:
            policy = TenantPolicy(tenant=tenant)
            return turns.begin(policy, "k1", body, request, None, 80, threads)

        first = asyncio.ensure_future(begin("acme"))
        second = asyncio.ensure_future(begin("acme"))
        other = await asyncio.wait_for(begin("globex"), timeout=5)
        assert other.history == EARLIER.conversation
        assert store.reads == ["acme", "globex"]  # acme's second has not read yet
        store.release.set()
        turns_done = await asyncio.wait_for(asyncio.gather(first, second), timeout=5)
        assert [t.history for t in turns_done] == [EARLIER.conversation] * 2
        assert store.reads == ["acme", "globex", "acme"] and len(turns.reading) == 0
        gone = {**body, "previous_response_id": "resp_gone"}
        acme, asked = TenantPolicy(tenant="acme"), decode_request(gone, 100)
        with pytest.raises(ResponseNotFound):
            await turns.begin(acme, "k1", gone, asked, None, 80, threads)
        assert len(turns.reading) == 0

    asyncio.run(main())


def _turns() -> tuple[MemoryResponseStore, Turns, Any]:
    """A store, its turns, and how a turn of acme's with `text` as its input begins."""
    store = MemoryResponseStore(ttl_s=60, max_entries=10)
    turns = Turns(store, max_items=100, offload_bytes=1 << 20)

    async def begin(text: str) -> Turn:
        body: dict[str, JSON] = {"model": "gpt-4o-mini", "input": text}
        request = decode_request(body, 100)
        acme = TenantPolicy(tenant="acme")
        return await turns.begin(acme, "k1", body, request, None, 80, TenantThreads(2, 8))

    return store, turns, begin


def test_a_turn_deleted_while_it_streams_is_not_stored(caplog: pytest.LogCaptureFixture) -> None:
    """The client deletes the turn's id (read from `response.created`) before the turn is
    answered: nothing is stored yet, and the answered turn is not stored after it (logged)."""
    store, turns, begin = _turns()

    async def main() -> str:
        streaming = await begin("hello")
        with pytest.raises(ResponseNotFound):  # the DELETE: nothing stored yet
            await turns.forget("acme", streaming.response_id)
        reply = {"id": streaming.response_id, "object": "response", "output": [OUTPUT]}
        await turns.remember(streaming, reply, TenantThreads(2, 8))
        return str(streaming.response_id)

    with caplog.at_level("WARNING", logger="lantern.responses"):
        deleted_id = asyncio.run(main())
    assert asyncio.run(store.get("acme", deleted_id)) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"response {deleted_id} not stored: deleted"
    ]


def test_a_native_reply_reusing_an_id_leaves_the_first_response_stored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A native upstream that answers two calls with the same id: the tenant's first response
    (and the chain continuing it) keeps its conversation; the second is served unstored and
    logged."""
    store, turns, begin = _turns()

    async def main() -> None:
        for text in ("first", "second"):
            reply = {"id": "resp_upstream", "object": "response", "output": [OUTPUT]}
            await turns.remember(await begin(text), reply, TenantThreads(2, 8))

    with caplog.at_level("WARNING", logger="lantern.responses"):
        asyncio.run(main())
    kept = asyncio.run(store.get("acme", "resp_upstream"))
    assert kept is not None
    assert [item["content"] for item in kept.conversation] == ["first", OUTPUT["content"]]
    assert [r.getMessage() for r in caplog.records] == ["response resp_upstream not stored: taken"]
