"""A tenant's tools as the door serves them: its sandboxed tools, then the tools of the upstream
servers it is granted, each under a name that cannot collide, in an order that only grows.

Owns names, order and definitions; it runs nothing (sandbox_tools.py, upstream.py do).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Protocol

import orjson
from mcp_types import Tool

from gateway.mcp.errors import UnknownTool
from gateway.mcp.sandbox_tools import sandbox_definition
from policies.model import TenantPolicy

SEPARATOR = "__"  # server names have no '_', so `orders__lookup_order` splits at the first


class UpstreamTools(Protocol):
    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        """The server's tools as last listed; None when no such server is declared."""
        ...


@dataclass(frozen=True, slots=True)
class ServedTool:
    name: str  # as the client sees it
    server: str  # "" for a sandboxed tool of the tenant's policy
    source_name: str  # the tool's name in the policy or on its server
    definition: Tool


class ToolOrder:
    """Per tenant, the order names were first served in: a new tool goes after the others, so
    the head of an agent's prompt (its tool list) keeps its bytes when a tool is added."""

    def __init__(self) -> None:
        self._names: dict[str, list[str]] = {}

    def arrange(self, tenant: str, tools: tuple[ServedTool, ...]) -> tuple[ServedTool, ...]:
        present = {tool.name: tool for tool in tools}
        kept = [name for name in self._names.get(tenant, ()) if name in present]
        known = set(kept)
        kept.extend(tool.name for tool in tools if tool.name not in known)
        self._names[tenant] = kept
        return tuple(present[name] for name in kept)


@dataclass(frozen=True, slots=True)
class _Built:
    """A tenant's tools as last built, and what they were built from (the policy's fields and
    each granted server's list, the very objects: a reloaded policy or a re-read list is a new
    one)."""

    tools: object  # policy.tools
    grants: object  # policy.mcp_servers
    lists: tuple[tuple[Tool, ...] | None, ...]  # by grant
    by_name: dict[str, ServedTool]
    listing: tuple[ServedTool, ...]  # arranged in the tenant's order
    digest: str  # of `listing`

    def built_from(self, policy: TenantPolicy, lists: tuple[object, ...]) -> bool:
        return (
            self.tools is policy.tools
            and self.grants is policy.mcp_servers
            and len(self.lists) == len(lists)
            and all(a is b for a, b in zip(self.lists, lists, strict=True))
        )


class ToolCatalogue:
    """Built once per tenant until its policy or a granted server's list changes: `tools/list`,
    every `tools/call` and the change checks (each second, for every tenant with a session)
    read what was built."""

    def __init__(self, upstreams: UpstreamTools, logger: logging.Logger) -> None:
        self._upstreams = upstreams
        self._order = ToolOrder()
        self._log = logger
        self._built: dict[str, _Built] = {}  # by tenant: one entry each

    async def listing(self, policy: TenantPolicy) -> tuple[ServedTool, ...]:
        """What `tools/list` answers this tenant, in its stable order."""
        return (await self._current(policy)).listing

    async def digest(self, policy: TenantPolicy) -> str:
        """`listing_digest` of the tenant's listing."""
        return (await self._current(policy)).digest

    async def listing_and_digest(self, policy: TenantPolicy) -> tuple[tuple[ServedTool, ...], str]:
        """The listing and its digest, from one build."""
        built = await self._current(policy)
        return built.listing, built.digest

    async def find(self, policy: TenantPolicy, name: str) -> ServedTool:
        """The tool `name` as the tenant's policy and the upstream lists stand now."""
        tool = (await self._current(policy)).by_name.get(name)
        if tool is None:
            raise UnknownTool(name)
        return tool

    def forget(self, tenant: str) -> None:
        """The tenant is gone: what was built for it goes."""
        self._built.pop(tenant, None)

    async def _current(self, policy: TenantPolicy) -> _Built:
        lists = tuple([await self._upstreams.tools(grant.name) for grant in policy.mcp_servers])
        built = self._built.get(policy.tenant)
        if built is not None and built.built_from(policy, lists):
            return built
        served = self._build(policy, lists)
        listing = self._order.arrange(policy.tenant, served)
        built = _Built(
            policy.tools,
            policy.mcp_servers,
            lists,
            {tool.name: tool for tool in served},
            listing,
            listing_digest(listing),
        )
        self._built[policy.tenant] = built
        return built

    def _build(
        self, policy: TenantPolicy, lists: tuple[tuple[Tool, ...] | None, ...]
    ) -> tuple[ServedTool, ...]:
        """Sandboxed tools in policy order, then each granted server's permitted tools in the
        server's own order; a served name already taken keeps its first owner."""
        served = [ServedTool(t.name, "", t.name, sandbox_definition(t)) for t in policy.tools]
        taken = {tool.name for tool in served}
        for grant, tools in zip(policy.mcp_servers, lists, strict=True):
            if tools is None:
                self._log.warning("mcp: %s is granted unknown server %r", policy.tenant, grant.name)
                continue
            for tool in tools:
                name = f"{grant.name}{SEPARATOR}{tool.name}"
                if grant.permits(tool.name) and name not in taken:
                    taken.add(name)
                    definition = tool.model_copy(update={"name": name})
                    served.append(ServedTool(name, grant.name, tool.name, definition))
        return tuple(served)


def listing_digest(tools: tuple[ServedTool, ...]) -> str:
    """The identity of a listing: same digest, same bytes in `tools/list`."""
    dumped = [t.definition.model_dump(mode="json", by_alias=True, exclude_none=True) for t in tools]
    return hashlib.sha256(orjson.dumps(dumped)).hexdigest()
