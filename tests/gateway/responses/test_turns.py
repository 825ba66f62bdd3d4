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
from gateway.responses import turns as turns_module
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
        turn = await turns.begin(tenant, "k1", body, request, None, len(orjson.dumps(body)))
        answer = {**OUTPUT, "id": "msg_second"}
        await turns.remember(
            turn, {"id": turn.response_id, "object": "response", "output": [answer]}
        )
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
        turn = await turns.begin(TenantPolicy(tenant="acme"), "k1", body, request, None, 40)
        reply = {"object": "response", "output": [OUTPUT]}
        await turns.remember(turn, reply if reply_id is None else {**reply, "id": reply_id})
        await turns.remember(turn, {**reply, "id": "resp_" + "x" * 251})  # the longest named
        return len(store)

    assert asyncio.run(main()) == 1
