"""The input items of a stored response (`GET /v1/responses/{id}/input_items`): their ids, the
query that pages them, and the page as OpenAI's `ResponseItemList`. Pure, so that a long
conversation may be read in a worker thread; no I/O, no HTTP.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from adapters.errors import WireFormatError
from adapters.types import JSON
from gateway.responses.store import StoredResponse

DEFAULT_LIMIT = 20
MAX_LIMIT = 100  # OpenAI's bounds on `limit`: 1 to 100
# the query parameters read; `include` changes nothing here (the gateway holds no encrypted
# reasoning or image URLs apart from the items), the SDK sends an array as `include[]`
_IGNORED = frozenset({"include", "include[]"})
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}
_INPUT_ROLES = frozenset({"user", "system", "developer"})
_TEXT_PARTS = frozenset({"text", "input_text", "output_text"})


@dataclass(frozen=True, slots=True)
class ItemQuery:
    limit: int = DEFAULT_LIMIT
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None  # the id of the item the page starts after


def parse_query(params: Mapping[str, str]) -> ItemQuery:
    """The query of `input_items`; raises WireFormatError naming the first bad parameter."""
    for key in params:
        if key not in ("limit", "order", "after") and key not in _IGNORED:
            raise WireFormatError(key, "parameter not supported by this gateway")
    limit = params.get("limit", str(DEFAULT_LIMIT))
    if not (limit.isascii() and limit.isdigit() and 1 <= int(limit) <= MAX_LIMIT):
        raise WireFormatError("limit", f"expected an integer from 1 to {MAX_LIMIT}")
    order = params.get("order", "desc")
    if order not in ("asc", "desc"):
        raise WireFormatError("order", "expected 'asc' or 'desc'")
    return ItemQuery(int(limit), "asc" if order == "asc" else "desc", params.get("after"))


def item_ids(
    conversation: Sequence[Mapping[str, JSON]], known: Sequence[str], response_id: str
) -> tuple[str, ...]:
    """An id for each item: the one it was stored with (`known`, in order), else its own
    `id`, else one made of `response_id` and its position (what a response stored before
    ids were kept lists, the same on every read)."""
    suffix = response_id.removeprefix("resp_")
    ids = list(known[: len(conversation)])
    for i in range(len(ids), len(conversation)):
        item = conversation[i]
        own = item.get("id")
        prefix = _ID_PREFIX.get(str(item.get("type")), "item")
        ids.append(own if isinstance(own, str) else f"{prefix}_{suffix}_in{i}")
    return tuple(ids)


def input_page(data: bytes, response_id: str, query: ItemQuery) -> dict[str, Any]:
    """The page of the stored response `data`'s input items (its conversation before its
    output) that `query` asks for; raises WireFormatError for an `after` it does not hold."""
    stored = StoredResponse.from_bytes(data)
    output = stored.response.get("output")
    num_inputs = len(stored.conversation) - (len(output) if isinstance(output, list) else 0)
    ids = item_ids(stored.conversation, stored.item_ids, response_id)
    order = range(num_inputs) if query.order == "asc" else range(num_inputs - 1, -1, -1)
    positions = list(order)
    start = 0
    if query.after is not None:
        found = [n for n, i in enumerate(positions) if ids[i] == query.after]
        if not found:
            raise WireFormatError("after", "no input item of this response has this id")
        start = found[0] + 1
    page = positions[start : start + query.limit]
    data_out = [as_resource(stored.conversation[i], ids[i]) for i in page]
    return {
        "object": "list",
        "data": data_out,
        "first_id": data_out[0]["id"] if data_out else None,
        "last_id": data_out[-1]["id"] if data_out else None,
        "has_more": start + query.limit < len(positions),
    }


def as_resource(item: Mapping[str, JSON], item_id: str) -> dict[str, JSON]:
    """An item as it was kept (as the client sent it) in OpenAI's listed form: with its id, a
    message's content as parts, a call's or output's status."""
    out: dict[str, JSON] = {**item, "id": item_id}
    kind = item.get("type")
    if kind == "message" and item.get("role") in _INPUT_ROLES:
        content = item.get("content")
        if isinstance(content, str):
            out["content"] = [{"type": "input_text", "text": content}]
    elif kind == "message":
        out["content"] = _output_parts(item.get("content"))
        out.setdefault("status", "completed")
    elif kind in ("function_call", "function_call_output"):
        out.setdefault("status", "completed")
    elif kind == "reasoning":
        out.setdefault("summary", [])
    return out


def _output_parts(content: JSON) -> list[JSON]:
    """An assistant message's content as output parts (a client may send a string, or text
    parts without annotations)."""
    if isinstance(content, str):
        return [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}]
    parts: list[JSON] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            part = {
                "type": "output_text",
                "text": part.get("text"),
                "annotations": part.get("annotations", []),
                "logprobs": part.get("logprobs", []),
            }
        parts.append(part)
    return parts
