"""`TenantListens`' slots, in process: listens that arrive together while the tenant's listing is
read never take more than the tenant's limit; a refused listen holds nothing; the tenant's entry
goes with its last stream; a tenant that is gone has its streams ended."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from mcp.server.subscriptions import InMemorySubscriptionBus
from mcp.shared.exceptions import MCPError
from mcp_types import (
    SubscriptionFilter,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from gateway.mcp.calls import McpCaller
from gateway.mcp.listen import TenantListens, _Tenant
from gateway.mcp.server import CALLER_SCOPE_KEY
from policies.model import TenantPolicy

PARAMS = SubscriptionsListenRequestParams(notifications=SubscriptionFilter(tools_list_changed=True))


class SlowCatalogue:
    """Reading a listing yields to the loop, as reading an upstream's list would."""

    async def listing(self, policy: TenantPolicy) -> tuple[()]:
        await asyncio.sleep(0.01)
        return ()


class HeldHandler:
    """A listen stream that stays open until `release` (or `close`)."""

    def __init__(self) -> None:
        self.open = 0
        self.release = asyncio.Event()

    async def __call__(self, ctx: Any, params: Any) -> SubscriptionsListenResult:
        self.open += 1
        try:
            await self.release.wait()
        finally:
            self.open -= 1
        return SubscriptionsListenResult()

    def close(self) -> None:
        self.release.set()


def ctx(tenant: str) -> Any:
    caller = McpCaller(TenantPolicy(tenant=tenant), "k1", "")
    return SimpleNamespace(request=SimpleNamespace(scope={CALLER_SCOPE_KEY: caller}))


def listens(max_per_tenant: int, max_streams: int) -> tuple[TenantListens, dict[str, HeldHandler]]:
    handlers: dict[str, HeldHandler] = {}
    out = TenantListens(SlowCatalogue(), max_per_tenant, max_streams)  # type: ignore[arg-type]

    def new(digest: str) -> _Tenant:
        handler = HeldHandler()
        handlers[f"h{len(handlers)}"] = handler
        return _Tenant(handler, InMemorySubscriptionBus(), digest)  # type: ignore[arg-type]

    out._new = new  # type: ignore[method-assign]
    return out, handlers


def test_listens_arriving_together_never_pass_the_tenants_limit() -> None:
    async def main() -> None:
        tenants, handlers = listens(max_per_tenant=2, max_streams=100)
        tasks = [asyncio.create_task(tenants(ctx("acme"), PARAMS)) for _ in range(5)]
        tasks.append(asyncio.create_task(tenants(ctx("globex"), PARAMS)))
        await asyncio.sleep(0.1)
        refused = [t for t in tasks if t.done()]
        assert len(refused) == 3
        for task in refused:
            with pytest.raises(MCPError, match="this tenant has 2 open"):
                task.result()
        assert sorted(h.open for h in handlers.values() if h.open) == [1, 2]  # globex, acme
        assert tenants.tenants() == {"acme", "globex"}
        tenants.gone("acme")  # its policy removed: its streams end, globex's stay
        await asyncio.sleep(0.01)
        assert tenants.tenants() == {"globex"}
        tenants.close()
        await asyncio.gather(*(t for t in tasks if t not in refused))
        assert tenants.tenants() == set()

    asyncio.run(main())


def test_the_gateways_limit_holds_across_tenants_and_slots_come_back() -> None:
    async def main() -> None:
        tenants, _ = listens(max_per_tenant=5, max_streams=2)
        first = [asyncio.create_task(tenants(ctx(t), PARAMS)) for t in ("a", "b")]
        await asyncio.sleep(0.05)
        with pytest.raises(MCPError, match="the gateway's limit"):
            await tenants(ctx("c"), PARAMS)
        assert tenants.tenants() == {"a", "b"}  # the refused tenant holds no entry
        tenants.gone("a")
        await asyncio.gather(first[0])
        third = asyncio.create_task(tenants(ctx("c"), PARAMS))
        await asyncio.sleep(0.05)
        assert not third.done() and tenants.tenants() == {"b", "c"}
        tenants.close()
        await asyncio.gather(first[1], third)

    asyncio.run(main())
