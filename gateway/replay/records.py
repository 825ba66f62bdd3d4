"""What a keyed reply is made of, as every store keeps it: the scope it belongs to, the
fingerprint of its request, and its entries (a head, byte chunks, an end). Pure; no I/O."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import orjson

from gateway.replay.errors import IdempotencyKeyInvalid
from sandbox.errors import IdempotencyKeyInvalid as ToolKeyInvalid
from sandbox.fingerprint import parse_idempotency_key

EntryKind = Literal["head", "chunk", "end"]
# running: a live lease; done: replayable; too_large: served, not stored
RecordState = Literal["running", "done", "too_large"]
ClaimKind = Literal["new", "running", "done", "too_large", "mismatch"]


@dataclass(frozen=True, slots=True)
class Entry:
    """One step of a recorded reply: the head (status and headers, as JSON), one chunk of
    the body as the client got it, or the end (`b"done"` or `b"too_large"`)."""

    kind: EntryKind
    data: bytes


@dataclass(frozen=True, slots=True)
class ReplyHead:
    status: int
    headers: tuple[tuple[str, str], ...]

    @property
    def is_stream(self) -> bool:
        return any(
            k == "content-type" and v.startswith("text/event-stream") for k, v in self.headers
        )

    def to_entry(self) -> Entry:
        return Entry("head", orjson.dumps([self.status, self.headers]))

    @classmethod
    def from_entry(cls, entry: Entry) -> ReplyHead:
        status, headers = orjson.loads(entry.data)
        return cls(status, tuple((k, v) for k, v in headers))


@dataclass(frozen=True, slots=True)
class Claim:
    """`new`: this caller runs the request, its writes fenced by `fence` (1, or higher when
    it took over a record whose lease ran out); otherwise the record as found."""

    kind: ClaimKind
    fence: int


@dataclass(frozen=True, slots=True)
class Page:
    """Entries `after` onwards of a record, and how the record stands: `state` None when it
    is gone (released or expired); `is_leased` False when its owner stopped renewing."""

    entries: tuple[Entry, ...]
    state: RecordState | None
    fence: int
    is_leased: bool


@dataclass(frozen=True, slots=True)
class ReplayLimits:
    retention_s: float = 24 * 3600.0
    lease_s: float = 30.0
    wait_s: float = 30.0  # a retry waits this long for a running reply, then 409
    max_reply_bytes: int = 4 * 1024 * 1024


def parse_key(header: str) -> str:
    """The header's key, as the tool-run API reads it (bare token or RFC 8941 string)."""
    try:
        return parse_idempotency_key(header)
    except ToolKeyInvalid as exc:
        raise IdempotencyKeyInvalid(str(exc).partition(": ")[2]) from None


def record_scope(tenant: str, key_id: str, key: str) -> str:
    """The record's name: readable tenant first, then a digest of the API key id and the key
    (any printable ASCII, so never used raw in a store key)."""
    digest = hashlib.sha256(f"{key_id}\x00{key}".encode()).hexdigest()[:40]
    return f"{tenant}:{digest}"


def split_scope(scope: str) -> tuple[str, str]:
    """(tenant, the rest) of a record's scope; tenant ids hold no ':'."""
    tenant, _, rest = scope.partition(":")
    return tenant, rest


def request_fingerprint(door: str, raw: bytes) -> str:
    """SHA-256 of the door and the canonical body (keys sorted, no whitespace): the same JSON
    written differently is the same request; a body that is not JSON counts as its bytes."""
    try:
        canonical = orjson.dumps(orjson.loads(raw), option=orjson.OPT_SORT_KEYS)
    except orjson.JSONDecodeError:
        canonical = raw
    return hashlib.sha256(door.encode() + b"\x00" + canonical).hexdigest()
