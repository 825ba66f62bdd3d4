"""Admission glue for the pipeline: tenant policy limits → `quotas`, the store chosen from settings,
`x-ratelimit-*` headers; budget alarms are `budget_alarm`'s, spend seeding `spend_seeding`'s.

Must not hold quota rules: what fits, windows, leases and refunds live in `quotas/`.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy.exc import SQLAlchemyError

from adapters.records import slot_init
from adapters.types import Usage
from gateway.core.budget_alarm import BudgetAlarm
from gateway.core.memo import PerObjectMemo
from gateway.core.shielded import taken_or_given_back
from gateway.core.spend_seeding import SpendSeeding
from gateway.ids import uuid4_hex
from gateway.telemetry.series import GaugeSeries
from policies.limits import LimitsPolicy, TokenWeights
from policies.model import TenantPolicy
from quotas.errors import (
    LimitNeverFits,
    QuotaError,
    QuotaExceeded,
    QuotaStoreUnavailable,
    SpendNotSeeded,
)
from quotas.failover import FailoverQuotaStore
from quotas.limits import Actual, Ask, Limits, Reservation, Settlement
from quotas.memory import MemoryQuotaStore
from quotas.redis_store import RedisQuotaStore
from quotas.store import QuotaStore

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from gateway.settings import Settings

log = logging.getLogger("lantern.admission")
REDIS_KEY_PREFIX = "lantern:quota:"


@slot_init
@dataclass(frozen=True, slots=True)
class Ticket:
    """An admitted call: its reservation and the policy it was admitted under."""

    reservation: Reservation
    limits: Limits
    policy: LimitsPolicy


def limits_from_policy(policy: LimitsPolicy) -> Limits:
    return Limits(
        tokens_per_minute=policy.tokens_per_minute,
        requests_per_minute=policy.requests_per_minute,
        concurrent_requests=policy.concurrent_requests,
        calls_per_session=policy.calls_per_session,
        monthly_budget_usd=policy.monthly_budget_usd,
        lease_ms=max(1, round(policy.lease_s * 1000)),
        session_ttl_ms=max(1, round(policy.session_ttl_s * 1000)),
        on_store_down_rates=policy.on_store_down.rates,
        on_store_down_budget=policy.on_store_down.budget,
    )


def reserved_tokens(prompt_tokens: int, max_output_tokens: int, weights: TokenWeights) -> int:
    """The worst case: every prompt token could turn out to be of the heaviest kind."""
    heaviest = max(1.0, weights.cache_read, weights.cache_write)
    return math.ceil(prompt_tokens * heaviest - 1e-9) + max_output_tokens


def counted_tokens(usage: Usage, weights: TokenWeights) -> int:
    """Tokens toward `tokens_per_minute`: input and output, plus cache reads/writes by weight."""
    cached = usage.cache_read_tokens * weights.cache_read
    cached += usage.cache_write_tokens * weights.cache_write
    return usage.input_tokens + usage.output_tokens + math.ceil(cached - 1e-9)


def rate_limit_headers(source: Ticket | QuotaExceeded) -> dict[str, str]:
    """The `x-ratelimit-*` headers OpenAI clients read, for the limits the tenant has."""
    window = source.reservation.window if isinstance(source, Ticket) else source.window
    if window is None:
        return {}
    headers: dict[str, str] = {}
    for kind, limit, used in (
        ("requests", window.requests_limit, window.requests_used),
        ("tokens", window.tokens_limit, window.tokens_used),
    ):
        if limit is None:
            continue
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(max(0, limit - used))
        headers[f"x-ratelimit-reset-{kind}"] = _duration(window.reset_ms)
    return headers


def _duration(ms: int) -> str:
    """OpenAI's reset format: `20ms`, `1.5s`, `6m0s`."""
    if ms < 1000:
        return f"{max(ms, 0)}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    minutes, rest = divmod(ms, 60_000)
    return f"{minutes}m{rest / 1000:g}s"


class AdmissionMetrics:
    """Admission's Prometheus metrics, on the registry of the app instance."""

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.rejections = Counter(
            "lantern_quota_rejections", "Calls refused by a limit", ["tenant", "limit"], registry=r
        )
        self.fallback = Counter(
            "lantern_quota_fallback_admissions",
            "Calls admitted on the per-process store while Redis was down",
            ["tenant"],
            registry=r,
        )
        self.store_down = Gauge("lantern_quota_store_down", "1 while Redis is down", registry=r)
        self.overrun = Counter(
            "lantern_quota_overrun_tokens",
            "Tokens used beyond what was reserved (upstream reported more)",
            ["tenant"],
            registry=r,
        )
        self.spend = GaugeSeries(
            "lantern_budget_spend_usd", "Spend this month (UTC)", ["tenant"], r
        )
        self.alarms = Counter(
            "lantern_budget_alarms", "Budget alarm thresholds crossed", ["tenant"], registry=r
        )

    def on_store_change(self, is_down: bool, reason: str) -> None:
        self.store_down.set(1 if is_down else 0)
        if is_down:
            log.error("quota store down (%s): tenants fail open or closed per policy", reason)
        else:
            log.warning("quota store back (%s)", reason)


class Admission:
    """Reserve before dispatch, settle after; built once per process (`from_settings`)."""

    def __init__(
        self,
        store: QuotaStore,
        *,
        metrics: AdmissionMetrics | None = None,
        clock: Callable[[], float] = time.time,
        new_id: Callable[[], str] = uuid4_hex,
        http: httpx.AsyncClient | None = None,
        webhook_timeout_s: float = 5.0,
    ) -> None:
        self._store = store
        self._clock = clock
        self._new_id = new_id
        self.metrics = metrics or AdmissionMetrics(CollectorRegistry())
        self._webhook_timeout_s = webhook_timeout_s
        self._background: set[asyncio.Future[Any]] = set()
        self._alarm = BudgetAlarm(self.metrics.alarms, self._background, http, webhook_timeout_s)
        self._seeding = SpendSeeding(store, clock)
        self._reseeding: asyncio.Future[None] | None = None
        # per tenant limits policy object (a reload makes a new one): built once, not per call
        self._limits_of: PerObjectMemo[LimitsPolicy, Limits] = PerObjectMemo(limits_from_policy)

    @classmethod
    def from_settings(
        cls, settings: Settings, registry: CollectorRegistry | None = None
    ) -> Admission:
        """Redis (with a per-process fallback, per tenant policy) when `redis_url` is set."""
        metrics = AdmissionMetrics(registry or CollectorRegistry())
        if settings.redis_url is None:
            return cls(MemoryQuotaStore(), metrics=metrics)
        shared = RedisQuotaStore.from_url(  # a Redis that lost the month's spend says so
            settings.redis_url, key_prefix=REDIS_KEY_PREFIX, requires_seeded_spend=True
        )
        store = FailoverQuotaStore(
            shared,
            MemoryQuotaStore(),
            on_change=lambda down, why: admission.on_store_change(down, why),
        )
        admission = cls(store, metrics=metrics)
        return admission

    @property
    def store(self) -> QuotaStore:
        return self._store

    async def start(self, engine: Engine) -> None:
        """Seed this month's spend per tenant from the ledger, so a restart does not reset it."""
        await self._seeding.start(engine)

    def on_store_change(self, is_down: bool, reason: str) -> None:
        """The shared store went down or came back. Back, it may have lost the month's spend (a
        Redis restarted without persistence): seed it again from the ledger, as at start."""
        self.metrics.on_store_change(is_down, reason)
        if is_down or not self._seeding.has_ledger or self._reseeding is not None:
            return
        self._reseeding = asyncio.ensure_future(self._seeding.reseed())
        self._background.add(self._reseeding)
        self._reseeding.add_done_callback(self._background.discard)
        self._reseeding.add_done_callback(self._reseeded)

    def _reseeded(self, _: asyncio.Future[None]) -> None:
        self._reseeding = None

    async def aclose(self) -> None:
        """Give in-flight settles and alarm webhooks their timeout to finish; close the store."""
        if self._background:
            _, late = await asyncio.wait(self._background, timeout=self._webhook_timeout_s)
            for future in late:
                future.cancel()
        await self._store.close()

    async def reserve(
        self,
        tenant: TenantPolicy,
        *,
        session_id: str | None,
        prompt_tokens: int,
        max_output_tokens: int,
        worst_case_usd: float,
        now_s: float | None = None,
    ) -> Ticket:
        """Hold the call's worst case. Raises `QuotaExceeded`, `LimitNeverFits` or
        `QuotaStoreUnavailable` (their attributes carry what HTTP needs; see quotas.errors)."""
        policy = tenant.limits
        limits = self._limits_of(policy)
        tokens = reserved_tokens(prompt_tokens, max_output_tokens, policy.token_weights)
        ask = Ask(tokens, max(0.0, worst_case_usd), session_id)
        reservation_id, now_ms = self._new_id(), self._now_ms(now_s)
        reserving = self._store.reserve(
            tenant.tenant, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        try:
            if self._store.settles_inline:
                reservation = await reserving
            else:
                reservation = await self._reserve_shielded(reserving)
        except QuotaError as exc:  # counted, or asked again once the month's spend is seeded
            reservation = await self._refused(
                tenant.tenant, limits, ask, reservation_id, now_ms, exc
            )
        if reservation.store != self._store.name:
            self.metrics.fallback.labels(tenant.tenant).inc()
        return Ticket(reservation, limits, policy)

    async def _refused(
        self,
        tenant_id: str,
        limits: Limits,
        ask: Ask,
        reservation_id: str,
        now_ms: int,
        exc: QuotaError,
    ) -> Reservation:
        """Count a refusal by its limit and raise it again; but a store that lost (or never
        had) the tenant's spend this month held nothing: seed it, then ask once more."""
        try:
            if not isinstance(exc, SpendNotSeeded):
                raise exc
            await self._seed_missing(tenant_id, limits)
            try:
                return await self._reserve_once(tenant_id, limits, ask, reservation_id, now_ms)
            except SpendNotSeeded as again:  # lost again between the seeding and the ask
                raise QuotaStoreUnavailable(self._store.name, "spend not seeded") from again
        except (QuotaExceeded, LimitNeverFits) as refused:
            self.metrics.rejections.labels(tenant_id, refused.limit).inc()
            raise
        except QuotaStoreUnavailable:
            self.metrics.rejections.labels(tenant_id, "store_unavailable").inc()
            raise

    async def _reserve_once(
        self, tenant_id: str, limits: Limits, ask: Ask, reservation_id: str, now_ms: int
    ) -> Reservation:
        """`reserve`'s store call once more, after seeding (off the common path)."""
        reserving = self._store.reserve(
            tenant_id, limits, ask, reservation_id=reservation_id, now_ms=now_ms
        )
        if self._store.settles_inline:
            return await reserving
        return await self._reserve_shielded(reserving)

    async def _seed_missing(self, tenant_id: str, limits: Limits) -> None:
        """The store lost (or never had) the tenant's spend this month: read it from the
        ledger. A ledger that cannot be read either fails the call closed (503) or, where the
        tenant's budget fails open, lets its spend count from 0 (logged)."""
        try:
            await self._seeding.seed_missing(tenant_id)
        except (SQLAlchemyError, OSError) as exc:
            if limits.on_store_down_budget == "fail_closed":
                raise QuotaStoreUnavailable("ledger", type(exc).__name__) from exc
            log.error("ledger unreadable: tenant %s's spend this month counts from 0", tenant_id)
            await self._seeding.seed(tenant_id, 0.0)

    async def settle(
        self, ticket: Ticket, *, usage: Usage, cost_usd: float, now_s: float | None = None
    ) -> None:
        """Charge what was used (after errors and disconnects too: pass what was produced).
        Never raises: a settle the store cannot take is logged, and its lease expires."""
        tenant = ticket.reservation.tenant
        actual = Actual(counted_tokens(usage, ticket.policy.token_weights), max(0.0, cost_usd))
        settling = self._store.settle(ticket.reservation, actual, now_ms=self._now_ms(now_s))
        try:
            settled = await (settling if self._store.settles_inline else self._shielded(settling))
        except QuotaError:
            log.exception("settle failed for tenant %s; its lease will expire", tenant)
            return
        if settled.overrun_tokens:
            log.warning(
                "tenant %s used %d tokens beyond its reservation", tenant, settled.overrun_tokens
            )
            self.metrics.overrun.labels(tenant).inc(settled.overrun_tokens)
        if settled.period_spend_usd is not None:
            self.metrics.spend.set((tenant,), settled.period_spend_usd)
            reservation = ticket.reservation
            self._alarm.check(tenant, reservation.period, ticket.policy, settled.period_spend_usd)

    async def _reserve_shielded(self, reserving: Coroutine[Any, Any, Reservation]) -> Reservation:
        """A reserve that may suspend: a caller cancelled while the store's answer is on its way
        (the client went away) gives the hold, and its concurrency slot, back once it arrives."""
        return await taken_or_given_back(reserving, self._give_back)

    def _give_back(self, reservation: Reservation) -> None:
        settling = self._store.settle(reservation, Actual(0), now_ms=self._now_ms(None))
        task = asyncio.ensure_future(self._settle_quietly(settling))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @staticmethod
    async def _settle_quietly(settling: Coroutine[Any, Any, Settlement]) -> None:
        try:
            await settling
        except QuotaError:
            log.exception("could not give back a reservation whose caller left; it will expire")

    async def _shielded(self, settling: Coroutine[Any, Any, Settlement]) -> Settlement:
        """A settle that may suspend runs in its own task: a cancelled caller (the client went
        away) must not cancel the settle itself. A store that settles inline needs none of this
        (no cancellation can land inside it), and the reply then waits for no extra loop turn."""
        pending = asyncio.ensure_future(settling)
        self._background.add(pending)
        pending.add_done_callback(self._background.discard)
        return await asyncio.shield(pending)

    def rate_headers(self, ticket_or_error: Ticket | QuotaExceeded) -> dict[str, str]:
        return rate_limit_headers(ticket_or_error)

    async def seed_spend(
        self, tenant_id: str, month_spend_usd: float, *, now_s: float | None = None
    ) -> None:
        """Raise this month's recorded spend to at least `month_spend_usd` (never lowers it)."""
        await self._seeding.seed(tenant_id, month_spend_usd, now_s=now_s)

    def _now_ms(self, now_s: float | None) -> int:
        return int((self._clock() if now_s is None else now_s) * 1000)
