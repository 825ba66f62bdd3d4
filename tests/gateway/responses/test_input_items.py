"""The input items of a stored response: ids kept or made the same on every read, OpenAI's
paging (`limit`, `order`, `after`), its listed item shapes, and a long conversation read in a
worker thread."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from adapters.errors import WireFormatError
from gateway.core.tenant_gate import TenantThreads
from gateway.responses import turns as turns_module
from gateway.responses.errors import ResponseNotFound
from gateway.responses.input_items import ItemQuery, input_page, item_ids, parse_query
from gateway.responses.store import MemoryResponseStore, StoredResponse
from gateway.responses.turns import Turns
from tests.openapi.openai_schema import check

INPUTS = (
    {"type": "message", "role": "developer", "content": "Be brief."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "assistant", "content": "earlier answer"},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_own"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
)
OUTPUT = {"id": "msg_r1_0", "type": "message", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "ok", "annotations": [], "logprobs": []}]}  # fmt: skip
REPLY = {"id": "resp_r1", "object": "response", "output": [OUTPUT]}
OLD = StoredResponse((*INPUTS, OUTPUT), REPLY)  # stored before ids were kept


def _page(stored: StoredResponse, **query: Any) -> dict[str, Any]:
    return input_page(stored.to_bytes(), "resp_r1", ItemQuery(**query))


def test_the_inputs_are_listed_newest_first_in_openai_shapes() -> None:
    page = _page(OLD)
    check("ResponseItemList", page)
    assert page == {
        "object": "list",
        "data": [
            {"type": "function_call_output", "call_id": "c1", "output": "sunny",
             "id": "fco_r1_in4", "status": "completed"},
            {**INPUTS[3], "status": "completed"},
            {"type": "message", "role": "assistant", "id": "msg_r1_in2", "status": "completed",
             "content": [{"type": "output_text", "text": "earlier answer", "annotations": [],
                          "logprobs": []}]},
            {**INPUTS[1], "id": "msg_r1_in1"},
            {"type": "message", "role": "developer", "id": "msg_r1_in0",
             "content": [{"type": "input_text", "text": "Be brief."}]},
        ],
        "first_id": "fco_r1_in4",
        "last_id": "msg_r1_in0",
        "has_more": False,
    }  # fmt: skip


def test_pages_follow_the_after_cursor_in_either_order() -> None:
    ids = ["msg_r1_in0", "msg_r1_in1", "msg_r1_in2", "fc_own", "fco_r1_in4"]
    first = _page(OLD, order="asc", limit=2)
    assert [i["id"] for i in first["data"]] == ids[:2] and first["has_more"] is True
    second = _page(OLD, order="asc", limit=2, after=first["last_id"])
    assert [i["id"] for i in second["data"]] == ids[2:4] and second["has_more"] is True
    third = _page(OLD, order="asc", limit=2, after=second["last_id"])
    assert [i["id"] for i in third["data"]] == ids[4:] and third["has_more"] is False
    back = _page(OLD, order="desc", limit=3, after="fc_own")
    assert [i["id"] for i in back["data"]] == ids[2::-1] and back["has_more"] is False
    empty = _page(OLD, order="asc", after="fco_r1_in4")
    assert (empty["data"], empty["first_id"], empty["has_more"]) == ([], None, False)
    for unknown in ("msg_elsewhere", "msg_" + "x" * 100_000):  # the client's id is not echoed
        with pytest.raises(WireFormatError) as err:
            _page(OLD, after=unknown)
        assert err.value.field == "after" and len(str(err.value)) < 100


def test_kept_ids_win_and_carry_along_a_chain() -> None:
    ids = item_ids(OLD.conversation, (), "resp_r1")
    assert ids == ("msg_r1_in0", "msg_r1_in1", "msg_r1_in2", "fc_own", "fco_r1_in4", "msg_r1_0")
    # the next response keeps these for its history and makes ids only for its own new items
    follow = (*OLD.conversation, {"type": "message", "role": "user", "content": "more"})
    assert item_ids(follow, ids, "resp_r2") == (*ids, "msg_r2_in6")
    kept = StoredResponse(OLD.conversation, REPLY, item_ids=("a", "b", "c", "d", "e", "f"))
    assert StoredResponse.from_bytes(kept.to_bytes()) == kept
    assert [i["id"] for i in _page(kept, order="asc")["data"]] == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"limit": "-1"}, "limit"),
        ({"order": "newest"}, "order"),
        ({"before": "msg_1"}, "before"),
    ],
)
def test_a_bad_query_is_rejected_naming_the_parameter(params: dict[str, str], field: str) -> None:
    with pytest.raises(WireFormatError) as err:
        parse_query(params)
    assert err.value.field == field


def test_a_query_reads_limit_order_after_and_ignores_include() -> None:
    assert parse_query({}) == ItemQuery(20, "desc", None)
    params = {"limit": "100", "order": "asc", "after": "msg_1", "include[]": "x"}
    assert parse_query(params) == ItemQuery(100, "asc", "msg_1")


def _threads_of_the_parse(offload_bytes: int, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """For each `input_items` read: whether the page was made on the event loop's thread."""
    on_loop: list[bool] = []
    loop_thread: list[int] = []

    def recorded(data: bytes, response_id: str, query: ItemQuery) -> dict[str, Any]:
        on_loop.append(threading.get_ident() == loop_thread[0])
        return input_page(data, response_id, query)

    monkeypatch.setattr(turns_module, "input_page", recorded)

    async def main() -> None:
        loop_thread.append(threading.get_ident())
        store = MemoryResponseStore(ttl_s=60, max_entries=10)
        await store.put("acme", "resp_r1", OLD.to_bytes())
        turns = Turns(store, max_items=100, offload_bytes=offload_bytes)
        threads = TenantThreads(2, 8)
        page = await turns.input_items("acme", "resp_r1", ItemQuery(), threads)
        assert len(page["data"]) == len(INPUTS)
        with pytest.raises(ResponseNotFound):  # another tenant's id: as if it never was
            await turns.input_items("other", "resp_r1", ItemQuery(), threads)

    asyncio.run(main())
    return on_loop


def test_a_long_conversation_is_paged_in_a_worker_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _threads_of_the_parse(len(OLD.to_bytes()), monkeypatch) == [False]
    assert _threads_of_the_parse(len(OLD.to_bytes()) + 1, monkeypatch) == [True]
