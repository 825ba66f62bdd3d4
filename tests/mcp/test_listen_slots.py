"""`TenantListens`' slots, in process, over the SDK's own `ListenHandler`: listens that arrive
together while the tenant's listing is read never take more than the tenant's limit; a refused
listen holds nothing; the tenant's entry goes with its last stream; a tenant that is gone has
its streams ended; a key that may no longer call has its own streams ended, and no other key's."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import (
    SubscriptionFilter,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
)

from gateway.mcp.calls import McpCaller
from gateway.mcp.listen import TenantListens
from gateway.mcp.server import CALLER_SCOPE_KEY
from policies.model import TenantPolicy

PARAMS = SubscriptionsListenRequestParams(notifications=SubscriptionFilter(tools_list_changed=True))
REQUEST_IDS = itertools.count(1)


class SlowCatalogue:
    """Reading a listing yields to the loop, as reading an upstream's list would."""

    async def digest(self, policy: TenantPolicy) -> str:
        await asyncio.sleep(0.01)
        return "d0"


class Session:
    """What the handler writes to its stream: the acknowledgement, then events."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def send_notification(self, notification: Any, related_request_id: Any = None) -> None:
        self.sent.append(notification)


def ctx(tenant: str, key_id: str = "k1") -> Any:
    caller = McpCaller(TenantPolicy(tenant=tenant), key_id, "")
    request = SimpleNamespace(scope={CALLER_SCOPE_KEY: caller})
    return SimpleNamespace(request=request, request_id=next(REQUEST_IDS), session=Session())


def listen(tenants: TenantListens, tenant: str, key_id: str = "k1") -> asyncio.Task[Any]:
    return asyncio.create_task(tenants(ctx(tenant, key_id), PARAMS))


def listens(max_per_tenant: int, max_streams: int) -> TenantListens:
    return TenantListens(SlowCatalogue(), max_per_tenant, max_streams)  # type: ignore[arg-type]


def test_listens_arriving_together_never_pass_the_tenants_limit() -> None:
    async def main() -> None:
        tenants = listens(max_per_tenant=2, max_streams=100)
        tasks = [listen(tenants, "acme") for _ in range(5)]
        tasks.append(listen(tenants, "globex"))
        await asyncio.sleep(0.1)
        refused = [t for t in tasks if t.done()]
        assert len(refused) == 3
        for task in refused:
            with pytest.raises(MCPError, match="this tenant has 2 open"):
                task.result()
        assert tenants.tenants() == {"acme", "globex"}
        tenants.gone("acme")  # its policy removed: its streams end, with their result
        await asyncio.sleep(0.01)
        ended = [t for t in tasks[:5] if t not in refused]
        assert all(isinstance(t.result(), SubscriptionsListenResult) for t in ended)
        assert not tasks[5].done() and tenants.tenants() == {"globex"}
        tenants.close()
        assert isinstance(await tasks[5], SubscriptionsListenResult)
        assert tenants.tenants() == set()

    asyncio.run(main())


def test_the_gateways_limit_holds_across_tenants_and_slots_come_back() -> None:
    async def main() -> None:
        tenants = listens(max_per_tenant=5, max_streams=2)
        first = [listen(tenants, t) for t in ("a", "b")]
        await asyncio.sleep(0.05)
        with pytest.raises(MCPError, match="the gateway's limit"):
            await tenants(ctx("c"), PARAMS)
        assert tenants.tenants() == {"a", "b"}  # the refused tenant holds no entry
        tenants.gone("a")
        await asyncio.gather(first[0])
        third = listen(tenants, "c")
        await asyncio.sleep(0.05)
        assert not third.done() and tenants.tenants() == {"b", "c"}
        tenants.close()
        await asyncio.gather(first[1], third)

    asyncio.run(main())


def test_a_keys_streams_end_and_its_neighbours_go_on() -> None:
    """acme's k2 may no longer call: its two streams end with their result; acme's k1 and
    globex's k2 (the same key id, another tenant) keep theirs, and the slots come back."""

    async def main() -> None:
        tenants = listens(max_per_tenant=3, max_streams=100)
        k1 = listen(tenants, "acme", "k1")
        k2 = [listen(tenants, "acme", "k2") for _ in range(2)]
        neighbour = listen(tenants, "globex", "k2")
        await asyncio.sleep(0.05)
        assert tenants.keys() == {("acme", "k1"), ("acme", "k2"), ("globex", "k2")}
        with pytest.raises(MCPError, match="this tenant has 3 open"):
            await tenants(ctx("acme", "k1"), PARAMS)
        tenants.end_key("acme", "k2")
        results = await asyncio.wait_for(asyncio.gather(*k2), 1)
        assert all(isinstance(r, SubscriptionsListenResult) for r in results)
        assert not k1.done() and not neighbour.done()
        assert tenants.keys() == {("acme", "k1"), ("globex", "k2")}
        again = listen(tenants, "acme", "k1")  # k2's slots are acme's again
        await asyncio.sleep(0.05)
        assert not again.done()
        tenants.end_key("acme", "k9")  # a key with no stream: nothing happens
        tenants.close()
        await asyncio.gather(k1, neighbour, again)

    asyncio.run(main())
