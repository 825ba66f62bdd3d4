"""One write for a fan-out: calls that would each write the same not-yet-cached prefix to the
same upstream at the same time wait for the first one's first byte, then read what it wrote.

In memory, per process; holds an entry only while a leading call is in flight before its first
byte. With `shared` (gateway/core/fanout_shared.py) the leading call also holds a lease in
Redis, and a process whose first call finds another's lease waits for it to be given back.
Knows nothing of prompts: the key (`CacheVerdict.write_key`) comes from the prompt port.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import anyio
import orjson

from gateway.core.fanout_shared import SharedLeases
from gateway.ports import CacheVerdict

MAX_LEADS_PER_TENANT = 64  # prefixes being written at once per tenant; past that, no waiting
MAX_WAIT_S = 30.0  # a waiter's bound when the leading call never reaches its first byte

FanoutKey = tuple[str, str, str]  # (tenant, prefix write key, upstream)


@dataclass(slots=True)
class Lead:
    """A call sending a prefix first; `release` (idempotent) lets its waiters go: at its first
    byte, or at once when it fails or is cancelled before one."""

    key: FanoutKey
    gate: FanoutGate
    event: anyio.Event = field(default_factory=anyio.Event)
    num_waiters: int = 0
    released: bool = False
    token: str | None = None  # the Redis lease it holds, if any

    def release(self) -> None:
        if not self.released:
            self.released = True
            self.event.set()
            self.gate.drop(self)


class FanoutGate:
    """The table of leading calls by (tenant, prefix key, upstream), bounded per tenant."""

    def __init__(
        self, max_leads_per_tenant: int = MAX_LEADS_PER_TENANT, max_wait_s: float = MAX_WAIT_S
    ) -> None:
        self._leads: dict[FanoutKey, Lead] = {}
        self._per_tenant: dict[str, int] = {}
        self._max_leads = max_leads_per_tenant
        self.max_wait_s = max_wait_s
        self.num_waited = 0  # calls that waited behind a leading call (metrics, tests)
        self.shared: SharedLeases | None = None  # leases across processes (Redis)
        self._tasks: set[asyncio.Task[None]] = set()

    async def turn(self, key: FanoutKey, can_lead: bool) -> tuple[Lead | None, float | None]:
        """Wait behind the call already writing `key`, if any: (None, seconds waited); else
        lead it when `can_lead` (a streamed call: its first byte is observable): (lead, None)."""
        lead = self._leads.get(key)
        if lead is not None:
            lead.num_waiters += 1
            self.num_waited += 1
            began = time.monotonic()
            with anyio.move_on_after(self.max_wait_s):
                await lead.event.wait()
            return None, time.monotonic() - began
        tenant = key[0]
        if self._per_tenant.get(tenant, 0) >= self._max_leads:
            return None, None
        if self.shared is not None:
            return await self._shared_turn(self.shared, key, can_lead)
        if not can_lead:
            return None, None
        return self._new_lead(key), None

    def _new_lead(self, key: FanoutKey) -> Lead:
        tenant = key[0]
        lead = self._leads[key] = Lead(key, self)
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        return lead

    async def _shared_turn(
        self, shared: SharedLeases, key: FanoutKey, can_lead: bool
    ) -> tuple[Lead | None, float | None]:
        """The entry is made before asking Redis, so this process's other calls for `key` wait
        on it: behind this call if it takes the lease, else behind the other process's lead."""
        lead = self._new_lead(key)
        began = time.monotonic()
        leads = False
        try:
            if can_lead:
                token = lead.token = uuid.uuid4().hex  # given back at release, taken or not
                holder = await shared.take(key, token)
                if holder is None:  # this call leads (alone when Redis is down)
                    leads = True
                    return lead, None
                lead.token = None
            else:
                holder = await shared.holder(key)
                if holder is None:
                    return None, None
            self.num_waited += 1
            with anyio.move_on_after(self.max_wait_s):
                await shared.wait_released(key, holder)
            return None, time.monotonic() - began
        finally:
            if not leads:  # a follower, nothing to follow, or cancelled: local waiters go too
                lead.release()

    def drop(self, lead: Lead) -> None:
        if lead.token is not None and self.shared is not None:
            self._give_back(self.shared, lead.key, lead.token)
        if self._leads.get(lead.key) is not lead:
            return
        del self._leads[lead.key]
        tenant = lead.key[0]
        left = self._per_tenant[tenant] - 1
        if left:
            self._per_tenant[tenant] = left
        else:
            del self._per_tenant[tenant]

    def _give_back(self, shared: SharedLeases, key: FanoutKey, token: str) -> None:
        """The lease back, off the path (a waiter elsewhere sees it at its next look)."""
        task = asyncio.get_running_loop().create_task(shared.give_back(key, token))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._leads)


def with_fanout_wait(verdict: CacheVerdict, waited_s: float) -> CacheVerdict:
    """The verdict with the wait behind a fan-out's first write in its diagnosis
    (`autopilot.fanout_wait_ms`)."""
    diagnosis = verdict.diagnosis_body()
    autopilot = diagnosis.get("autopilot")
    if not isinstance(autopilot, Mapping):
        autopilot = {"relocated": [], "tool_args": 0}
    waited = {**autopilot, "fanout_wait_ms": round(waited_s * 1000.0)}
    body = {**diagnosis, "autopilot": waited}
    return replace(verdict, diagnosis_json=orjson.dumps(body).decode(), diagnosis=body)
