"""One turn of a Responses conversation: the stored history it continues, the pipeline call it
becomes, and what is stored once it is answered. No HTTP here; the route shapes the replies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.errors import WireFormatError
from adapters.types import JSON, ChatRequest
from adapters.wire import openai as openai_wire
from adapters.wire.json_fields import expect
from adapters.wire.responses import (
    ResponsesRequest,
    check_response_id,
    parse_request,
    to_chat_request,
)
from gateway.core.calls import IncomingCall
from gateway.core.identifiers import check_identifiers
from gateway.core.tenant_gate import TenantThreads
from gateway.errors import RequestRejected
from gateway.ids import uuid4_hex
from gateway.responses.errors import ResponseNotFound
from gateway.responses.gate import READS_PER_TENANT, TenantGate
from gateway.responses.input_items import ItemQuery, input_page, item_ids
from gateway.responses.store import PutOutcome, ResponseStore, StoredResponse
from policies.model import TenantPolicy

log = logging.getLogger("lantern.responses")
DOOR = "responses"
PATH_ID = "response_id"  # the path parameter of GET, DELETE and input_items
# the door's names for the pipeline's fields (it speaks chat completions inside)
_FIELDS = {
    "max_tokens": "max_output_tokens",
    "messages": "input",
    "response_format": "text.format",
    "reasoning_effort": "reasoning.effort",
}
REPLY_QUERY = frozenset({"include", "include[]", "include_obfuscation", "starting_after", "stream"})
USER_FIELDS = ("safety_identifier", "user")  # the end user's id, by the names it may come by


@dataclass(frozen=True, slots=True)
class Turn:
    response_id: str
    created_at: int
    request: ResponsesRequest
    history: tuple[Mapping[str, JSON], ...]  # the stored conversation this turn continues
    call: IncomingCall
    history_ids: tuple[str, ...] = ()  # the ids of `history`'s items, in order


def decode_request(body: Mapping[str, Any], max_items: int) -> ResponsesRequest:
    """The checked body, its input alone held to `max_items` (before anything is looked up);
    pure, so that a large body may be decoded in a worker thread."""
    items = body.get("input")
    if isinstance(items, list):
        check_items(len(items), max_items)
    return parse_request(body)


def check_items(num_items: int, max_items: int) -> None:
    if num_items > max_items:
        raise RequestRejected(
            f"input: {num_items} items; the gateway's limit is {max_items}",
            rule="max_messages",
            field="input",
        )


def translate(
    request: ResponsesRequest, history: Sequence[Mapping[str, JSON]]
) -> tuple[ChatRequest, dict[str, Any]]:
    """The pipeline's request and its chat-completions body; pure, so it may run in a thread."""
    chat = to_chat_request(request, history)
    return chat, openai_wire.encode_request(chat)


Prepared = tuple[tuple[Mapping[str, JSON], ...], tuple[str, ...], ChatRequest, dict[str, Any]]


def prepare(request: ResponsesRequest, stored: bytes | None, max_items: int) -> Prepared:
    """The conversation `stored` holds (the bytes of the response `previous_response_id`
    names, unread), its item ids, and the turn's pipeline request and body, the items held to
    `max_items` in all; pure, so that a long conversation is read in a worker thread."""
    history: tuple[Mapping[str, JSON], ...] = ()
    history_ids: tuple[str, ...] = ()
    if stored is not None and request.previous_response_id is not None:
        found = StoredResponse.from_bytes(stored)
        history = found.conversation
        history_ids = item_ids(history, found.item_ids, request.previous_response_id)
    check_items(len(history) + len(request.input_items), max_items)
    chat, encoded = translate(request, history)
    return history, history_ids, chat, encoded


def check_reply_query(params: Mapping[str, str]) -> None:
    """The query of `GET /v1/responses/{id}`, as OpenAI's document declares it: `include` is
    accepted and changes nothing (the gateway holds no more of a reply than the reply), nor
    do `include_obfuscation` and `starting_after` without a stream; `stream=true` (streaming a
    background response again) and any other parameter are a WireFormatError naming it."""
    for key, value in params.items():
        if key not in REPLY_QUERY:
            raise WireFormatError(key, "parameter not supported by this gateway")
        if key == "stream" and value != "false":
            raise WireFormatError("stream", "a stored response is not streamed again; omit it")


def check_client_ids(
    body: Mapping[str, Any], request: ResponsesRequest, session_header: str | None
) -> None:
    """The client's identifiers (`identifier` rule), the end user's id by each name it came
    by, named by it. OpenAI's document types both `user` and `safety_identifier` as strings
    (`user` deprecated for `safety_identifier`, which the call keeps when both came), so a
    `user` beside a `safety_identifier` is held to the same rules as one alone. Cheap: run
    before any stored conversation is read."""
    sent = [(name, body[name]) for name in USER_FIELDS if body.get(name) is not None]
    for name, value in sent or [("user", None)]:
        user = None if value is None else expect(value, str, name)
        probe = ChatRequest(request.model, (), prompt_cache_key=request.prompt_cache_key, user=user)
        check_identifiers("openai", probe, session_header, {name: user})


class Turns:
    """Builds turns from bodies and keeps answered ones in the tenant's store. A turn whose
    body and stored conversation together reach `offload_bytes` is translated, paged and
    encoded on the caller's per-tenant threads (the door's large-body ones), so that the loop
    keeps serving other tenants meanwhile, a tenant's flood behind its own; its continuations
    read and expand their conversations `reads_per_tenant` at a time (gate.py)."""

    def __init__(
        self,
        store: ResponseStore,
        max_items: int,
        offload_bytes: int,
        wall_clock: Callable[[], float] = time.time,
        reads_per_tenant: int = READS_PER_TENANT,
    ) -> None:
        self.store = store
        self.max_items = max_items
        self._offload_bytes = offload_bytes
        self._wall_clock = wall_clock
        # a tenant's continuations reading and expanding their conversations, a few at a time
        self.reading = TenantGate(reads_per_tenant)

    async def begin(
        self,
        tenant: TenantPolicy,
        key_id: str,
        body: Mapping[str, Any],
        request: ResponsesRequest,
        session_header: str | None,
        body_bytes: int,
        threads: TenantThreads,
    ) -> Turn:
        """The turn of a decoded body (`decode_request`); raises WireFormatError,
        ResponseNotFound or RequestRejected. The client's identifiers are checked before the
        stored conversation is read, and a long one is read in one of `threads`."""
        check_client_ids(body, request, session_header)
        num_bytes = body_bytes
        if (previous := request.previous_response_id) is None:
            history, history_ids, chat, encoded = await self._prepare(
                tenant.tenant, threads, request, None, num_bytes
            )
        else:
            async with self.reading.slot(tenant.tenant):
                stored = await self.store.get_bytes(tenant.tenant, previous)
                if stored is None:
                    raise ResponseNotFound(previous, "previous_response_id")
                num_bytes += len(stored)
                history, history_ids, chat, encoded = await self._prepare(
                    tenant.tenant, threads, request, stored, num_bytes
                )
        native = {**body, "input": [*history, *request.input_items]}
        call = IncomingCall(
            "openai",
            tenant,
            key_id,
            chat,
            encoded,
            session_header,
            body_bytes=num_bytes,  # what the call weighs: its body and the conversation read
            door=DOOR,
            native_body=native,
        )
        response_id = "resp_" + uuid4_hex()
        created_at = int(self._wall_clock())
        return Turn(response_id, created_at, request, history, call, history_ids)

    async def _prepare(
        self,
        tenant: str,
        threads: TenantThreads,
        request: ResponsesRequest,
        stored: bytes | None,
        num_bytes: int,
    ) -> Prepared:
        """`prepare`, in one of `threads` (the tenant's turn) when body and conversation
        reach `offload_bytes`."""
        if num_bytes >= self._offload_bytes:
            return await threads.run(tenant, prepare, request, stored, self.max_items)
        return prepare(request, stored, self.max_items)

    async def reply(self, tenant: str, response_id: str) -> bytes:
        """The stored reply's JSON (`GET /v1/responses/{id}`), as stored: neither it nor its
        conversation is parsed."""
        check_response_id(response_id, PATH_ID)
        found = await self.store.get_reply(tenant, response_id)
        if found is None:
            raise ResponseNotFound(response_id)
        return found

    async def input_items(
        self, tenant: str, response_id: str, query: ItemQuery, threads: TenantThreads
    ) -> dict[str, Any]:
        """A page of the stored response's input items (`GET /v1/responses/{id}/input_items`);
        a conversation of `offload_bytes` or more is read in one of `threads`, the tenant's
        turn (a tenant's flood of long pages waits behind its own)."""
        check_response_id(response_id, PATH_ID)
        data = await self.store.get_bytes(tenant, response_id)
        if data is None:
            raise ResponseNotFound(response_id)
        if len(data) >= self._offload_bytes:
            return await threads.run(tenant, input_page, data, response_id, query)
        return input_page(data, response_id, query)

    async def forget(self, tenant: str, response_id: str) -> None:
        check_response_id(response_id, PATH_ID)
        if not await self.store.delete(tenant, response_id):
            raise ResponseNotFound(response_id)

    async def remember(self, turn: Turn, reply: Mapping[str, Any], threads: TenantThreads) -> None:
        """Keep an answered turn (unless the client said `store: false`), encoded in one of
        `threads`, the tenant's turn, when the turn was large (its whole conversation is
        written again). A store that fails or refuses (store.py's `PutOutcome`: the id deleted
        while the turn streamed, or held by another response, or a response over the store's
        whole bound) costs the client its continuation, not the answer it paid for: logged."""
        if not turn.request.store:
            return
        response_id = addressable(reply.get("id"))  # ours, or a native upstream's
        if response_id is None:
            log.warning("response not stored: its reply has no id that GET could name")
            return
        try:
            if turn.call.body_bytes >= self._offload_bytes:
                data = await threads.run(turn.call.tenant.tenant, encode_turn, turn, reply)
            else:
                data = encode_turn(turn, reply)
            outcome = await self.store.put(turn.call.tenant.tenant, response_id, data)
        except Exception:
            log.exception("could not store response %s", response_id)
            return
        if outcome is not PutOutcome.STORED:
            log.warning("response %s not stored: %s", response_id, outcome.value)


def addressable(response_id: Any) -> str | None:
    """`response_id` if `GET /v1/responses/{id}` could name it (a string of 1 to 256
    characters: an upstream's reply may carry none, or any)."""
    try:
        return check_response_id(response_id, PATH_ID) or None
    except WireFormatError:
        return None


def encode_turn(turn: Turn, reply: Mapping[str, Any]) -> bytes:
    """What an answered turn is stored as: its conversation so far (history, input, output),
    with the items' ids, and the reply; pure, so that a long one is encoded in a thread."""
    conversation = (*turn.history, *turn.request.input_items, *reply["output"])
    ids = item_ids(conversation, turn.history_ids, str(reply["id"]))
    return StoredResponse(conversation, reply, item_ids=ids).to_bytes()


def native_reply(turn: Turn, reply: Mapping[str, Any]) -> dict[str, Any]:
    """An upstream's own reply as this door answers it: the client's model name, and the
    continuation and storage it asked for (the upstream was sent neither)."""
    return {
        **reply,
        "model": turn.request.model,
        "previous_response_id": turn.request.previous_response_id,
        "store": turn.request.store,
    }


def door_error(exc: Exception) -> Exception:
    """A pipeline error that names a field by its chat-completions name, renamed for this door."""
    field = getattr(exc, "field", None)
    if isinstance(field, str) and field in _FIELDS:
        exc.field = _FIELDS[field]  # type: ignore[attr-defined]
    return exc
