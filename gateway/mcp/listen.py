"""`subscriptions/listen` (the 2026-07-28 wire): a client's stream of change events, told when
its tenant's tool list really changes, and only its own tenant's.

Each tenant has its own bus, and each of its keys with a stream open the SDK's `ListenHandler`
over that bus, kept while the key has a stream open: a key that may no longer call has its
streams ended (`end_key`) and no other key's. Bounded: `max_per_tenant` open streams per tenant
(one tenant's flood of listens never takes another's), `max_streams` in the process; a listen
past either is refused before its acknowledgement, as the SDK refuses one past its own limit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, SubscriptionsListenRequestParams, SubscriptionsListenResult

from gateway.mcp.catalogue import ToolCatalogue
from gateway.mcp.server import caller_of


@dataclass
class _Key:
    handler: ListenHandler
    streams: int = 0


@dataclass
class _Tenant:
    bus: InMemorySubscriptionBus
    digest: str  # the listing its listeners were last told of (or listened at)
    streams: int = 0
    keys: dict[str, _Key] = field(default_factory=dict)  # by key id, while it has a stream


class TenantListens:
    """The `on_subscriptions_listen` handler of the MCP server, and the changes it announces."""

    def __init__(self, catalogue: ToolCatalogue, max_per_tenant: int, max_streams: int) -> None:
        self._catalogue = catalogue
        self._max_per_tenant = max_per_tenant
        self._max_streams = max_streams
        self._tenants: dict[str, _Tenant] = {}
        self._streams = 0

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """Serve one listen stream of the caller's tenant until the client leaves."""
        caller = caller_of(ctx)
        tenant, key_id = caller.policy.tenant, caller.key_id
        found = self._tenants.get(tenant)
        if found is None:  # its first stream: the listing it listens from
            digest = await self._catalogue.digest(caller.policy)
            found = self._tenants.get(tenant) or _Tenant(InMemorySubscriptionBus(), digest)
        # from here to the count, no await: two listens cannot both take the last slot
        if found.streams >= self._max_per_tenant:
            raise MCPError(
                INTERNAL_ERROR,
                f"listen streams: this tenant has {found.streams} open, its limit here",
            )
        if self._streams >= self._max_streams:
            raise MCPError(INTERNAL_ERROR, "listen streams: the gateway's limit is reached")
        key = found.keys.get(key_id)
        if key is None:
            handler = ListenHandler(found.bus, max_subscriptions=self._max_per_tenant)
            key = found.keys[key_id] = _Key(handler)
        self._tenants[tenant] = found
        found.streams += 1
        key.streams += 1
        self._streams += 1
        try:
            return await key.handler(ctx, params)
        finally:
            key.streams -= 1
            found.streams -= 1
            self._streams -= 1
            if key.streams == 0 and found.keys.get(key_id) is key:
                del found.keys[key_id]
            if found.streams == 0 and self._tenants.get(tenant) is found:
                del self._tenants[tenant]

    def tenants(self) -> set[str]:
        """The tenants with a stream open."""
        return set(self._tenants)

    def keys(self) -> set[tuple[str, str]]:
        """The (tenant, key id) pairs with a stream open."""
        return {(t, k) for t, found in self._tenants.items() for k in found.keys}

    async def listing_is(self, tenant: str, digest: str) -> None:
        """The tenant's listing now has `digest`: its listeners are told when it changed."""
        found = self._tenants.get(tenant)
        if found is not None and found.digest != digest:
            found.digest = digest
            await found.bus.publish(ToolsListChanged())

    def end_key(self, tenant: str, key_id: str) -> None:
        """The key may no longer call: its streams end (each with its result, the spec's
        graceful close); the tenant's other keys' streams go on."""
        found = self._tenants.get(tenant)
        key = None if found is None else found.keys.pop(key_id, None)
        if key is not None:
            key.handler.close()

    def gone(self, tenant: str) -> None:
        """The tenant is gone (its policy removed): its streams end."""
        found = self._tenants.pop(tenant, None)
        if found is not None:
            for key in found.keys.values():
                key.handler.close()
            found.keys.clear()

    def close(self) -> None:
        """Every stream ends (the gateway stops)."""
        for tenant in list(self._tenants):
            self.gone(tenant)
