"""Keep-warm reads (`cache.keep_warm: true`): one minimal call that keeps a paused session's
provider cache entry alive, when `cachekeys.keep_warm` says it costs less than a rewrite.

Per process, memory only: the last call of each session whose tenant turned it on (the
client's own call, so it holds prompt text; bounded, never written anywhere), with when its
entry expires. With Redis, only the process that served a session's latest call reads for it
(gateway/core/keep_warm_latest.py). Just before the entry expires, the call is sent again with
`max_tokens: 1` through the pipeline's own admission, quotas, routing and ledger: the tenant
pays for it, its budgets count it, and its ledger row has `door: keep_warm`. The read is not
one of the session's calls for the autopilot's gap statistics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from adapters.types import Usage
from cachekeys.keep_warm import LEAD_S, OUTPUT_RATIO, keep_warm_choice, next_expiry
from cachekeys.tenant_table import TenantTable
from cachekeys.ttl import TTL_S, Ttl
from gateway.core.cache_autopilot import CacheAutopilot
from gateway.core.calls import Admitted, IncomingCall, max_tokens_field
from gateway.core.keep_warm_latest import LatestCalls
from gateway.core.pipeline import Pipeline
from gateway.core.prompt_prepare import PromptFacts
from policies.model import TenantPolicy

log = logging.getLogger(__name__)

DOOR = "keep_warm"  # the ledger's `door` of a keep-warm read
MAX_SESSIONS = 1000  # sessions held in all (each holds its last prompt), shared fairly by tenants
INTERVAL_S = 5.0  # how often the loop looks for entries about to expire
# backends whose prompt cache is Anthropic's (5 min / 1 h entries, write premiums, reads refresh)
KEEPABLE_KINDS = frozenset({"anthropic", "bedrock"})


@dataclass(slots=True)
class WarmSession:
    """A session's last call and its provider entry, as the last real call left it."""

    call: IncomingCall  # resent as it came, with max_tokens 1
    route: str  # the model route it was priced on
    root: str  # the autopilot's session root
    last_s: float  # when that call was served
    expires_s: float  # seconds after `last_s` when the provider entry goes
    ttl: Ttl
    prefix_tokens: int  # what the provider holds: read + written by that call
    token: str = ""  # the call's token among the processes (LatestCalls), when shared
    refreshes: int = 0  # reads sent since

    @property
    def due_s(self) -> float:
        return self.last_s + self.expires_s - LEAD_S


class KeepWarm:
    """`note` each served call; `tick` (or `run`) sends the reads that are due and worth it."""

    def __init__(
        self,
        pipeline: Pipeline,
        autopilot: CacheAutopilot,
        clock: Callable[[], float] = time.monotonic,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        self._pipeline = pipeline
        self._autopilot = autopilot
        self._clock = clock
        # past `max_sessions`, the tenant holding the most loses its oldest: no tenant's
        # sessions pushed out by another's burst
        self.sessions: TenantTable[str, WarmSession] = TenantTable(max_sessions)
        self.sent = 0
        # (tenant, key id) -> the policy a call with that key runs under now, None when the key
        # may no longer call (KeyChain.policy_for_key_id); unset: the last call's policy
        self.policy_for: Callable[[str, str], TenantPolicy | None] | None = None
        # shared with the other gateway processes: only the one that served a session's latest
        # call reads for it; unset: this process decides alone
        self.latest: LatestCalls | None = None

    def note(self, adm: Admitted, usage: Usage, backend_kind: str) -> None:
        """A call was served (by a backend of `backend_kind`): remember it when its tenant keeps
        sessions warm and the call left an entry a read can keep."""
        if adm.call.door == DOOR:
            return  # a read of ours: `tick` reschedules it
        facts = adm.prepared.diagnosis
        if not isinstance(facts, PromptFacts) or facts.steering is None:
            return
        key = (adm.call.tenant.tenant, facts.steering.root)
        self.sessions.pop(key, None)
        if not adm.call.tenant.cache.keep_warm:
            return
        token = self.latest.served(key) if self.latest is not None else ""
        prefix = usage.cache_read_tokens + usage.cache_write_tokens
        if prefix == 0 or not _keepable(adm, backend_kind):
            return
        ttl: Ttl = "1h" if adm.prepared.write_ttl == "1h" else "5m"
        self.sessions[key] = WarmSession(
            adm.call, adm.route.name, key[1], self._clock(), TTL_S[ttl], ttl, prefix, token
        )

    async def tick(self) -> int:
        """Send the reads now due, together; sessions not worth one are dropped. Returns the
        reads sent."""
        if self.latest is not None:
            await self.latest.publish()
        now = self._clock()
        due = [key for key, s in self.sessions.items() if s.due_s <= now]
        chosen = [(key, self.sessions.pop(key)) for key in due]
        chosen = [(key, s) for key, s in chosen if self._worth_a_read(key[0], s, now)]
        if self.latest is not None and chosen:  # another process served a later call: its read
            ours = await self.latest.latest([(key, s.token) for key, s in chosen])
            chosen = [pair for pair, mine in zip(chosen, ours, strict=True) if mine]
        results = await asyncio.gather(*(self._read(s) for _, s in chosen))
        for (key, session), sent in zip(chosen, results, strict=True):
            if sent:
                session.expires_s = next_expiry(session.expires_s, session.ttl)
                session.refreshes += 1
                if key not in self.sessions:  # no real call came meanwhile
                    self.sessions[key] = session
        self.sent += sum(results)
        return sum(results)

    def _worth_a_read(self, tenant: str, session: WarmSession, now: float) -> bool:
        if now >= session.last_s + session.expires_s:
            return False  # too late: the entry is gone
        record = self._autopilot.sessions.get(tenant, session.root)
        gaps = record.gaps_s if record is not None else ()
        pricing = self._pipeline.s.pricing
        per_input = pricing.cost_usd(session.route, Usage(1))
        ratio = pricing.cost_usd(session.route, Usage(0, 1)) / per_input if per_input else None
        choice = keep_warm_choice(
            gaps,
            session.ttl,
            session.expires_s,
            session.prefix_tokens,
            session.refreshes,
            OUTPUT_RATIO if ratio is None else ratio,
        )
        return choice.refresh

    async def run(self, interval_s: float = INTERVAL_S) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.tick()
            except Exception:  # keep the loop; say what failed
                log.exception("keep-warm tick failed")

    async def _read(self, session: WarmSession) -> bool:
        """Send the read through the pipeline; True when the provider answered."""
        call = _minimal(session.call)
        tenant = call.tenant.tenant
        if self.policy_for is not None:
            policy = self.policy_for(tenant, call.key_id)
            if policy is None or not policy.cache.keep_warm:
                return False
            call = dataclasses.replace(call, tenant=policy)
        record = self._autopilot.sessions.get(tenant, session.root)
        try:
            adm = await self._pipeline.admit(call)
            try:
                await self._pipeline.complete(adm)
            finally:
                self._autopilot.sessions.restore(tenant, session.root, record)
        except Exception as exc:  # a quota said no, the provider failed: the entry is let go
            log.info("keep-warm read for tenant %s not sent: %s", tenant, exc)
            return False
        return True


def _keepable(adm: Admitted, backend_kind: str) -> bool:
    """A provider whose entries have the lifetimes and write premiums the rule prices, and a call
    one output token can repeat (extended thinking needs max_tokens above its budget, and
    turning it off would change what the messages' entries hold)."""
    thinking = adm.call.body.get("thinking")
    thinks = isinstance(thinking, dict) and thinking.get("type") == "enabled"
    return backend_kind in KEEPABLE_KINDS and not thinks


def _minimal(call: IncomingCall) -> IncomingCall:
    """The call again, for one output token, not streamed, on the keep-warm door."""
    body = dict(call.body)
    body[max_tokens_field(call.wire, body)] = 1
    body.pop("stream", None)
    body.pop("stream_options", None)
    request = dataclasses.replace(call.request, max_tokens=1, stream=False)
    return dataclasses.replace(call, request=request, body=body, door=DOOR)
