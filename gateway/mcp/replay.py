"""What a handshake-era session sent on its SSE streams, kept so that a client that lost a stream
reconnects with `Last-Event-ID` and is sent the rest of that stream (the spec's resumability).
Bounded per session and per tenant; a session's events are forgotten when it ends, and no other
session, of its tenant or another, can read them.

Kept in the gateway process that holds the session, as the session itself.
"""

from __future__ import annotations

import base64
import binascii
import logging
from collections import OrderedDict
from dataclasses import dataclass, field

from mcp.server.streamable_http import (
    GET_STREAM_KEY,
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp_types import INTERNAL_ERROR, ErrorData, JSONRPCError, JSONRPCMessage, JSONRPCResponse

log = logging.getLogger("lantern.mcp")

# what an event holds besides its message (the entry, its keys): counted against the tenant's
# bytes so that many small events are bounded as much as a few large ones
EVENT_OVERHEAD_BYTES = 200
MAX_NAMED_STREAM_BYTES = 48  # a request id longer than this is not named in its events' ids


@dataclass(frozen=True, slots=True)
class _Event:
    stream_id: StreamId
    message: JSONRPCMessage | None  # None: a stream's priming event (nothing to send again)
    num_bytes: int


@dataclass
class _Tenant:
    num_bytes: int = 0
    num_sessions: int = 0
    # (session id, seq) of its sessions' events, oldest first
    order: OrderedDict[tuple[str, int], None] = field(default_factory=OrderedDict)


class SessionEvents(EventStore):
    """One session's events: the SDK's event store of its transport. An event's id is
    `<session id>.<seq>.<stream>` (`g`: the GET stream; `r` and the request id in base64url, or
    `r` alone for a long one), so that an id whose event is no longer kept still says which
    stream it was on; an id of another session is not one of these and replays nothing."""

    def __init__(self, store: ReplayEvents, tenant: str) -> None:
        self.tenant = tenant
        self.session_id = ""  # set when the SDK admits the session, before any event
        self.is_open = True
        self.events: OrderedDict[int, _Event] = OrderedDict()  # by seq, oldest first
        self.next_seq = 0
        # requests whose stream opened and whose reply is not yet sent, oldest first
        self.pending: OrderedDict[StreamId, None] = OrderedDict()
        self._store = store

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self._store.add(self, stream_id, message)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Sends the events of `last_event_id`'s stream that came after it and names that
        stream (the SDK then sends the stream's later events on this connection); None when
        the id is not one of this session's. An id whose event is no longer kept: the GET
        stream, or a request not yet answered, goes on from now (what was missed is lost, as
        without an id); an answered request's stream gets an error in place of its reply,
        which is gone, so that the client's request ends rather than waits."""
        found = self._after(last_event_id)
        if found is None:
            return None
        stream_id, later = found
        for event_id, message in later:
            await send_callback(EventMessage(message, event_id))
        return stream_id

    def _after(
        self, last_event_id: str
    ) -> tuple[StreamId | None, list[tuple[str | None, JSONRPCMessage]]] | None:
        session_id, seq_text, tag = (*last_event_id.split("."), "", "")[:3]
        if (
            session_id != self.session_id
            or last_event_id.count(".") != 2
            or not (seq_text.isascii() and seq_text.isdigit())
            or int(seq_text) >= self.next_seq
            or not self.is_open
        ):
            return None
        seq = int(seq_text)
        last = self.events.get(seq)
        if last is None:  # issued, no longer kept: what came after it cannot be sent whole
            return self._lost(_stream_of(tag))
        if _event_id(session_id, seq, last.stream_id) != last_event_id:  # not as it was sent
            return None
        # every event after a kept one is kept too (the oldest always go first); taken now,
        # before any send, so events stored meanwhile do not change what is iterated
        later: list[tuple[str | None, JSONRPCMessage]] = [
            (_event_id(session_id, n, event.stream_id), event.message)
            for n, event in self.events.items()
            if n > seq and event.stream_id == last.stream_id and event.message is not None
        ]
        return last.stream_id, later

    def _lost(
        self, stream_id: StreamId | None
    ) -> tuple[StreamId | None, list[tuple[str | None, JSONRPCMessage]]] | None:
        if stream_id is None:  # a request id too long to be named: as the SDK, nothing
            return None
        log.info(
            "mcp: session %s resumes %s past events no longer kept", self.session_id, stream_id
        )
        if stream_id == GET_STREAM_KEY or stream_id in self.pending:
            return stream_id, []
        lost = JSONRPCError(
            jsonrpc="2.0",
            id=stream_id,
            error=ErrorData(
                code=INTERNAL_ERROR,
                message="the reply to this request was sent and is no longer kept for "
                "resuming (mcp.replay_events_per_session)",
                data={"rule": "replay_events_per_session"},
            ),
        )
        return None, [(None, lost)]

    def note(self, stream_id: StreamId, message: JSONRPCMessage | None) -> None:
        """Keeps `pending` (bounded as the events are): a request's stream opens with its
        priming event and is answered by a response or an error."""
        if stream_id == GET_STREAM_KEY:
            return
        if message is None:
            self.pending[stream_id] = None
            if len(self.pending) > self._store.events_per_session:
                self.pending.popitem(last=False)
        elif isinstance(message, JSONRPCResponse | JSONRPCError):
            self.pending.pop(stream_id, None)


def _event_id(session_id: str, seq: int, stream_id: StreamId) -> str:
    if stream_id == GET_STREAM_KEY:
        return f"{session_id}.{seq}.g"
    named = stream_id.encode()
    if len(named) > MAX_NAMED_STREAM_BYTES:
        return f"{session_id}.{seq}.r"
    return f"{session_id}.{seq}.r" + base64.urlsafe_b64encode(named).decode().rstrip("=")


def _stream_of(tag: str) -> StreamId | None:
    """The stream an event id's last part names; None when it names none."""
    if tag == "g":
        return GET_STREAM_KEY
    if not tag.startswith("r") or len(tag) == 1:
        return None
    try:
        return base64.urlsafe_b64decode(tag[1:] + "=" * (-len(tag[1:]) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


class ReplayEvents:
    """The events of every session of this process: the newest `events_per_session` of each
    session, and at most `bytes_per_tenant` in all of one tenant's sessions (its oldest event
    goes first), so one tenant's chatty sessions never push out another tenant's events."""

    def __init__(self, events_per_session: int, bytes_per_tenant: int) -> None:
        if events_per_session < 1 or bytes_per_tenant < 1:
            raise ValueError("events_per_session and bytes_per_tenant must be at least 1")
        self.events_per_session = events_per_session
        self.bytes_per_tenant = bytes_per_tenant
        self._tenants: dict[str, _Tenant] = {}
        self._sessions: dict[str, SessionEvents] = {}  # by session id, while it is open

    def open(self, tenant: str) -> SessionEvents:
        """The event store of a session about to be admitted (`admitted` once it is)."""
        return SessionEvents(self, tenant)

    def admitted(self, events: SessionEvents, session_id: str) -> None:
        events.session_id = session_id
        self._sessions[session_id] = events
        self._tenants.setdefault(events.tenant, _Tenant()).num_sessions += 1

    def num_bytes(self, tenant: str) -> int:
        found = self._tenants.get(tenant)
        return 0 if found is None else found.num_bytes

    def forget(self, session_id: str) -> None:
        """The session ended: its events go, and nothing it sends later is kept."""
        events = self._sessions.pop(session_id, None)
        if events is None:
            return
        events.is_open = False
        tenant = self._tenants[events.tenant]
        while events.events:
            self._drop_oldest(events, tenant)
        tenant.num_sessions -= 1
        if tenant.num_sessions == 0:
            del self._tenants[events.tenant]

    def add(
        self, events: SessionEvents, stream_id: StreamId, message: JSONRPCMessage | None
    ) -> str:
        seq = events.next_seq
        events.next_seq += 1
        event_id = _event_id(events.session_id, seq, stream_id)
        if not events.is_open:
            return event_id
        events.note(stream_id, message)
        tenant = self._tenants[events.tenant]
        size = (
            0
            if message is None
            else len(message.model_dump_json(by_alias=True, exclude_unset=True))
        )
        num_bytes = EVENT_OVERHEAD_BYTES + len(stream_id) + size
        if num_bytes > self.bytes_per_tenant:
            # too large to keep: a replay from before it could not be whole, so none is offered
            while events.events:
                self._drop_oldest(events, tenant)
            return event_id
        while len(events.events) >= self.events_per_session:
            self._drop_oldest(events, tenant)
        while tenant.num_bytes + num_bytes > self.bytes_per_tenant:
            session_id, _ = next(iter(tenant.order))  # its session's oldest too
            self._drop_oldest(self._sessions[session_id], tenant)
        events.events[seq] = _Event(stream_id, message, num_bytes)
        tenant.order[(events.session_id, seq)] = None
        tenant.num_bytes += num_bytes
        return event_id

    def _drop_oldest(self, events: SessionEvents, tenant: _Tenant) -> None:
        seq, event = events.events.popitem(last=False)
        del tenant.order[(events.session_id, seq)]
        tenant.num_bytes -= event.num_bytes
