"""The tool list's rules without processes: names, order that only appends, grants, schemas,
limits with a pinned clock."""

from __future__ import annotations

import asyncio
import logging

import pytest
from mcp_types import Tool

from gateway.core.admission import limits_from_policy
from gateway.mcp.catalogue import ToolCatalogue, listing_digest
from gateway.mcp.errors import ToolCallsLimited, UnknownTool
from gateway.mcp.limits import ToolCallLimiter
from gateway.mcp.sandbox_tools import sandbox_definition
from policies.limits import LimitsPolicy
from policies.model import TenantPolicy
from policies.tools import ToolPolicy
from quotas.limits import Ask
from quotas.memory import MemoryQuotaStore

LOG = logging.getLogger("test.mcp")


class FakeUpstreams:
    """Declared servers and their tool lists, as `UpstreamServers.tools` answers."""

    def __init__(self, lists: dict[str, list[str]]) -> None:
        self.lists = lists

    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        names = self.lists.get(server)
        if names is None:
            return None
        return tuple(Tool(name=n, input_schema={"type": "object"}) for n in names)


def policy(tools: list[str], grants: list[object]) -> TenantPolicy:
    entries = [{"name": n, "command": ["/bin/echo", "{text}"]} for n in tools]
    return TenantPolicy.model_validate({"tenant": "acme", "tools": entries, "mcp_servers": grants})


def names(catalogue: ToolCatalogue, tenant: TenantPolicy) -> list[str]:
    return [t.name for t in asyncio.run(catalogue.listing(tenant))]


def test_sandboxed_then_granted_tools_with_allow_and_deny() -> None:
    upstreams = FakeUpstreams({"orders": ["lookup", "cancel", "refund"], "crm": ["find"]})
    catalogue = ToolCatalogue(upstreams, LOG)
    grants = [{"name": "orders", "deny": ["refund"]}, "crm", "unknown"]
    assert names(catalogue, policy(["zeta", "alpha"], grants)) == [
        "zeta",
        "alpha",
        "orders__lookup",
        "orders__cancel",
        "crm__find",
    ]
    only = policy([], [{"name": "orders", "allow": ["cancel"]}])
    assert names(catalogue, only) == ["orders__cancel"]
    with pytest.raises(UnknownTool):
        asyncio.run(catalogue.find(only, "orders__lookup"))


def test_new_tools_are_appended_and_the_bytes_stay() -> None:
    upstreams = FakeUpstreams({"orders": ["lookup", "cancel"]})
    catalogue = ToolCatalogue(upstreams, LOG)
    before = asyncio.run(catalogue.listing(policy(["b"], ["orders"])))
    upstreams.lists["orders"] = ["aardvark", "lookup", "cancel"]  # inserted first upstream
    after = asyncio.run(catalogue.listing(policy(["a", "b"], ["orders"])))
    # new ones after the old, among themselves in the catalogue's own order
    assert [t.name for t in after] == [*(t.name for t in before), "a", "orders__aardvark"]
    assert listing_digest(after[: len(before)]) == listing_digest(before)
    # a removed tool leaves no gap; if it comes back it comes back last
    upstreams.lists["orders"] = ["aardvark", "cancel"]
    assert names(catalogue, policy(["a", "b"], ["orders"])) == [
        "b",
        "orders__cancel",
        "a",
        "orders__aardvark",
    ]
    upstreams.lists["orders"] = ["aardvark", "lookup", "cancel"]
    assert names(catalogue, policy(["a", "b"], ["orders"]))[-1] == "orders__lookup"


def test_a_sandboxed_tool_keeps_a_name_an_upstream_tool_would_take() -> None:
    catalogue = ToolCatalogue(FakeUpstreams({"orders": ["lookup"]}), LOG)
    served = asyncio.run(catalogue.listing(policy(["orders__lookup"], ["orders"])))
    assert [(t.name, t.server) for t in served] == [("orders__lookup", "")]


def test_schema_from_placeholders_in_command_order() -> None:
    tool = ToolPolicy.model_validate(
        {
            "name": "fetch",
            "command": ["fetch", "--id={id}", "{{literal}}", "{mode}", "{id}"],
            "description": "Fetch one record.",
            "arguments": {"mode": {"type": "string", "enum": ["fast", "full"]}},
        }
    )
    definition = sandbox_definition(tool)
    assert (definition.name, definition.description) == ("fetch", "Fetch one record.")
    assert definition.input_schema == {
        "type": "object",
        "properties": {
            "id": {"type": "string"},
            "mode": {"type": "string", "enum": ["fast", "full"]},
        },
        "required": ["id", "mode"],
        "additionalProperties": False,
    }


def test_limits_per_minute_and_at_once_with_a_retry_hint() -> None:
    now = [1000.0]
    limiter = ToolCallLimiter(MemoryQuotaStore(), lambda: now[0])
    limits = LimitsPolicy(tool_calls_per_minute=2, concurrent_tool_calls=1)

    async def scenario() -> None:
        async with limiter.slot("acme", limits, None):
            with pytest.raises(ToolCallsLimited) as busy:
                async with limiter.slot("acme", limits, None):
                    pass
            assert (busy.value.rule, busy.value.retry_after_s) == (
                "limits.concurrent_tool_calls",
                1,
            )
            async with limiter.slot("globex", limits, None):  # another tenant is not counted
                pass
        now[0] += 20
        async with limiter.slot("acme", limits, None):
            pass
        with pytest.raises(ToolCallsLimited) as window:
            async with limiter.slot("acme", limits, None):
                pass
        assert (window.value.rule, window.value.retry_after_s) == (
            "limits.tool_calls_per_minute",
            40,
        )
        now[0] += 40
        async with limiter.slot("acme", limits, None):
            pass

    asyncio.run(scenario())


def test_a_named_session_counts_its_tool_calls_with_its_model_calls() -> None:
    store, now = MemoryQuotaStore(), [1000.0]
    limiter = ToolCallLimiter(store, lambda: now[0])
    policy = LimitsPolicy(calls_per_session=2)

    async def scenario() -> None:
        ask = Ask(1, 0.0, "run-7")  # a model call of the agent session `run-7`
        await store.reserve("acme", limits_from_policy(policy), ask, reservation_id="m", now_ms=1)
        async with limiter.slot("acme", policy, "run-7"):
            pass
        with pytest.raises(ToolCallsLimited) as spent:
            async with limiter.slot("acme", policy, "run-7"):
                pass
        assert (spent.value.rule, spent.value.retry_after_s) == ("limits.calls_per_session", 86_400)
        for _ in range(3):  # a call naming no session is not counted
            async with limiter.slot("acme", policy, None):
                pass

    asyncio.run(scenario())


class HeldUpstreams:
    """As the real servers hold them: one tuple per server until the list is read again."""

    def __init__(self, lists: dict[str, list[str]]) -> None:
        self.held = {s: self._tools(names) for s, names in lists.items()}

    @staticmethod
    def _tools(names: list[str]) -> tuple[Tool, ...]:
        return tuple(Tool(name=n, input_schema={"type": "object"}) for n in names)

    def read_again(self, server: str, names: list[str]) -> None:
        self.held[server] = self._tools(names)

    async def tools(self, server: str) -> tuple[Tool, ...] | None:
        return self.held.get(server)


def test_a_tenants_tools_are_built_once_until_its_policy_or_a_list_changes() -> None:
    """Every check and tool call reads one build; a reloaded policy (a new object), or a
    server's list read again, builds anew; a key's narrowed copy of the policy (its models
    only) reads the same build; another tenant has its own."""

    async def main() -> None:
        upstreams = HeldUpstreams({"orders": ["lookup"], "crm": ["find"]})
        catalogue = ToolCatalogue(upstreams, LOG)
        acme = policy(["echo"], ["orders"])
        first = await catalogue.listing(acme)
        assert await catalogue.listing(acme) is first
        narrowed = acme.model_copy(update={"models": ("smollm2",)})
        assert await catalogue.listing(narrowed) is first
        assert (await catalogue.find(acme, "orders__lookup")).source_name == "lookup"
        digest = await catalogue.digest(acme)
        assert digest == listing_digest(first)
        globex = TenantPolicy.model_validate({"tenant": "globex", "mcp_servers": ["crm"]})
        assert [t.name for t in await catalogue.listing(globex)] == ["crm__find"]
        assert await catalogue.listing(acme) is first  # globex's build is its own

        upstreams.read_again("orders", ["lookup", "cancel"])
        relisted = await catalogue.listing(acme)
        assert [t.name for t in relisted] == ["echo", "orders__lookup", "orders__cancel"]
        assert await catalogue.digest(acme) != digest
        assert (await catalogue.find(acme, "orders__cancel")).server == "orders"

        reloaded = policy(["echo", "grep"], ["orders"])  # the file changed: a new object
        listing, new_digest = await catalogue.listing_and_digest(reloaded)
        assert [t.name for t in listing][-1] == "grep"
        assert new_digest == listing_digest(listing)
        catalogue.forget("acme")
        rebuilt = await catalogue.listing(reloaded)
        assert rebuilt == listing and rebuilt is not listing  # built again, in the same order
        with pytest.raises(UnknownTool):
            await catalogue.find(policy(["echo"], []), "orders__lookup")  # grant withdrawn

    asyncio.run(main())
