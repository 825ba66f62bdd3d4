"""What a handshake-era session sent on its SSE streams, kept so that a client that lost a stream
reconnects with `Last-Event-ID` and is sent the rest of that stream (the spec's resumability).
Bounded per session and per tenant; a session's events are forgotten when it ends, and no other
session, of its tenant or another, can read them.

Kept in the gateway process that holds the session, as the session itself.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

# what an event holds besides its message (the entry, its keys): counted against the tenant's
# bytes so that many small events are bounded as much as a few large ones
EVENT_OVERHEAD_BYTES = 200


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
    `<session id>.<seq>`; an id of another session is not one of these and replays nothing."""

    def __init__(self, store: ReplayEvents, tenant: str) -> None:
        self.tenant = tenant
        self.session_id = ""  # set when the SDK admits the session, before any event
        self.is_open = True
        self.events: OrderedDict[int, _Event] = OrderedDict()  # by seq, oldest first
        self.next_seq = 0
        self._store = store

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        return self._store.add(self, stream_id, message)

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Sends the events of `last_event_id`'s stream that came after it and names that
        stream; None (nothing sent) when the id is not one of this session's events kept."""
        found = self._after(last_event_id)
        if found is None:
            return None
        stream_id, later = found
        for event_id, message in later:
            await send_callback(EventMessage(message, event_id))
        return stream_id

    def _after(
        self, last_event_id: str
    ) -> tuple[StreamId, list[tuple[str, JSONRPCMessage]]] | None:
        session_id, _, seq_text = last_event_id.rpartition(".")
        if session_id != self.session_id or not (seq_text.isascii() and seq_text.isdigit()):
            return None
        seq = int(seq_text)
        last = self.events.get(seq) if self.is_open else None
        if last is None:  # never this session's, or no longer kept: its stream cannot be whole
            return None
        # every event after a kept one is kept too (the oldest always go first); taken now,
        # before any send, so events stored meanwhile do not change what is iterated
        later = [
            (f"{session_id}.{n}", event.message)
            for n, event in self.events.items()
            if n > seq and event.stream_id == last.stream_id and event.message is not None
        ]
        return last.stream_id, later


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
        event_id = f"{events.session_id}.{seq}"
        if not events.is_open:
            return event_id
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
