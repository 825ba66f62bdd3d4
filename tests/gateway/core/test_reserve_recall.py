"""The quota reservation and the shared affinity's recall, made at once before the plan."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from adapters.types import Usage
from gateway.core.reserve_recall import reserve_recalling
from policies.model import TenantPolicy
from quotas.errors import QuotaExceeded

TENANT = TenantPolicy(tenant="acme")


class Shared:
    """A fake store for both ports: each side can wait for the other to have started."""

    def __init__(self, *, refuse: bool = False, recall_fails: bool = False) -> None:
        self.refuse, self.recall_fails = refuse, recall_fails
        self.reserving, self.recalling = asyncio.Event(), asyncio.Event()
        self.recall_cancelled = False
        self.settled: list[tuple[Any, Usage, float]] = []
        self.recalled: list[tuple[str, str]] = []

    async def reserve(self, tenant: TenantPolicy, **ask: Any) -> str:
        self.reserving.set()
        await self.recalling.wait()  # answers only once the recall is under way too
        if self.refuse:
            raise QuotaExceeded("tokens_per_minute", 1.0, 1.0, 1000)
        return f"ticket for {tenant.tenant} {ask['session_id']}"

    async def settle(self, ticket: Any, *, usage: Usage, cost_usd: float) -> None:
        self.settled.append((ticket, usage, cost_usd))

    async def recall(self, tenant: str, session_id: str) -> None:
        self.recalling.set()
        try:
            await self.reserving.wait()  # answers only once the reservation is under way too
            if self.refuse:
                await asyncio.Event().wait()  # still in flight when the refusal comes
        except asyncio.CancelledError:
            self.recall_cancelled = True
            raise
        if self.recall_fails:
            raise RuntimeError("recall broke")
        self.recalled.append((tenant, session_id))


def run(store: Shared) -> Any:
    async def go() -> Any:
        return await asyncio.wait_for(
            reserve_recalling(
                store,  # type: ignore[arg-type]
                store,  # type: ignore[arg-type]
                TENANT,
                "s1",
                budget_session="b1",
                prompt_tokens=10,
                max_tokens=5,
                worst_case_usd=0.01,
            ),
            timeout=30,
        )

    return asyncio.run(go())


def test_both_are_in_flight_at_once_and_both_finish() -> None:
    store = Shared()  # made one after the other, each would wait for the other for ever
    assert run(store) == "ticket for acme b1"
    assert store.recalled == [("acme", "s1")]
    assert store.settled == []


def test_a_refused_reservation_cancels_the_recall() -> None:
    store = Shared(refuse=True)
    with pytest.raises(QuotaExceeded):
        run(store)
    assert store.recall_cancelled and store.recalled == []


def test_a_failed_recall_gives_the_reservation_back() -> None:
    store = Shared(recall_fails=True)
    with pytest.raises(RuntimeError, match="recall broke"):
        run(store)
    assert store.settled == [("ticket for acme b1", Usage(), 0.0)]
