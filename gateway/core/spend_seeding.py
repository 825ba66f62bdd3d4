"""This month's spend per tenant, from the usage ledger into the quota store: at start, when the
shared store comes back from an outage, and for a tenant whose budget the store finds unseeded
(it lost its data without any call seeing an outage).

Must not decide admission: it only raises a recorded spend (seeding never lowers one).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from gateway.ledger.db import session_factory
from gateway.ledger.queries import LedgerQueries
from quotas.errors import QuotaStoreUnavailable
from quotas.limits import budget_period, usd_to_micro
from quotas.store import QuotaStore

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger("lantern.admission")


class SpendSeeding:
    """Seeds `store` from the ledger once `start` made the ledger known. Tenants found unseeded
    at the same time share one ledger read (`seed_missing`); the table of those waiting holds
    each tenant at most once, and only until its read is done."""

    def __init__(self, store: QuotaStore, clock: Callable[[], float]) -> None:
        self._store = store
        self._clock = clock
        self._ledger: Engine | None = None
        self._waiting: set[str] = set()  # tenants for the next ledger read
        self._next_read: asyncio.Future[None] | None = None  # the read they will be in
        self._tasks: set[asyncio.Future[None]] = set()

    @property
    def has_ledger(self) -> bool:
        return self._ledger is not None

    async def start(self, engine: Engine) -> None:
        """Seed every tenant with spend this month, so a restart does not reset it."""
        self._ledger = engine
        for tenant_id, usd in (await self._month_spend(engine)).items():
            await self.seed(tenant_id, usd)

    async def reseed(self) -> None:
        """`start` again (a store that came back may have lost the month's spend); a ledger that
        cannot be read leaves the spend as the store has it."""
        if self._ledger is None:
            return
        try:
            await self.start(self._ledger)
        except Exception:  # the ledger is down too
            log.exception("could not seed the month's spend again after the quota store came back")

    async def seed_missing(self, tenant_id: str) -> None:
        """Seed `tenant_id`'s spend this month from the ledger (0 when it has none there). With
        no ledger known yet (the database has not answered since start), seed 0: `start` raises
        it once the ledger answers. Raises what reading the ledger raised."""
        if self._ledger is None:
            log.warning("no ledger yet: tenant %s's spend this month starts from 0", tenant_id)
            await self.seed(tenant_id, 0.0)
            return
        self._waiting.add(tenant_id)
        if self._next_read is None:
            self._next_read = asyncio.ensure_future(self._seed_waiting(self._ledger))
            self._tasks.add(self._next_read)
            self._next_read.add_done_callback(self._tasks.discard)
        await asyncio.shield(self._next_read)  # one caller leaving stops no one else's read

    async def seed(
        self, tenant_id: str, month_spend_usd: float, *, now_s: float | None = None
    ) -> None:
        """Raise this month's recorded spend to at least `month_spend_usd` (never lowers it)."""
        now_ms = int((self._clock() if now_s is None else now_s) * 1000)
        period, _ = budget_period(now_ms)
        try:
            await self._store.seed_spend(
                tenant_id, period, usd_to_micro(month_spend_usd), now_ms=now_ms
            )
        except QuotaStoreUnavailable:
            log.warning("could not seed the spend of %s into the shared store (down)", tenant_id)

    async def _seed_waiting(self, engine: Engine) -> None:
        tenants, self._waiting, self._next_read = self._waiting, set(), None
        spend = await self._month_spend(engine)
        for tenant_id in tenants:
            await self.seed(tenant_id, spend.get(tenant_id, 0.0))

    async def _month_spend(self, engine: Engine) -> dict[str, float]:
        queries = LedgerQueries(session_factory(engine))
        now = datetime.fromtimestamp(self._clock(), UTC)
        return await asyncio.to_thread(queries.month_spend_by_tenant, now)
