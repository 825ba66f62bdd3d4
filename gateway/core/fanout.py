"""One write for a fan-out: calls that would each write the same not-yet-cached prefix to the
same upstream at the same time wait for the first one's first byte, then read what it wrote.

Per process, in memory; holds an entry only while a leading call is in flight before its first
byte. Knows nothing of prompts: the key (`CacheVerdict.write_key`) comes from the prompt port.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import anyio
import orjson

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
        if not can_lead or self._per_tenant.get(tenant, 0) >= self._max_leads:
            return None, None
        lead = self._leads[key] = Lead(key, self)
        self._per_tenant[tenant] = self._per_tenant.get(tenant, 0) + 1
        return lead, None

    def drop(self, lead: Lead) -> None:
        if self._leads.get(lead.key) is not lead:
            return
        del self._leads[lead.key]
        tenant = lead.key[0]
        left = self._per_tenant[tenant] - 1
        if left:
            self._per_tenant[tenant] = left
        else:
            del self._per_tenant[tenant]

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
