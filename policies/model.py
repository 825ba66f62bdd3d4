"""A tenant's policy: the frozen, validated form of `policy_dir/<tenant>.yaml`.

Sections live in their own modules (limits, cache, routing, tools, tracing); this module composes them
and owns the tenant's identity and API keys. Pure data: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated

from pydantic import AfterValidator, Field
from pydantic_core import PydanticCustomError

from policies.base import PolicyModel
from policies.cache import CachePolicy
from policies.limits import LimitsPolicy
from policies.mcp import McpServerGrant
from policies.routing import RoutingPolicy
from policies.tools import ToolPolicy, ToolRunsPolicy
from policies.tracing import TracingPolicy

_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
_TENANT_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")


def hash_api_key(key: str) -> str:
    """The stored form of an API key: lowercase hex sha256 of its UTF-8 bytes."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def _check_sha256(value: str) -> str:
    if not _SHA256_HEX.fullmatch(value):
        raise PydanticCustomError(
            "sha256_hex",
            "must be 64 lowercase hex digits (the sha256 of the key; see `lantern keys create`)",
        )
    return value


def _check_tenant_id(value: str) -> str:
    if not _TENANT_ID.fullmatch(value):
        raise PydanticCustomError(
            "tenant_id",
            "must be 1-63 characters of a-z, 0-9, '_' or '-', starting with a letter or digit",
        )
    return value


class ApiKeyEntry(PolicyModel):
    id: str = Field(min_length=1)
    sha256: Annotated[str, AfterValidator(_check_sha256)]


class TenantPolicy(PolicyModel):
    tenant: Annotated[str, AfterValidator(_check_tenant_id)]
    name: str = ""
    api_keys: tuple[ApiKeyEntry, ...] = ()
    models: tuple[str, ...] = ()  # client model names this tenant may call; empty: all
    backends: tuple[str, ...] | None = None  # allowed backend names; None: all
    limits: LimitsPolicy = LimitsPolicy()
    cache: CachePolicy = CachePolicy()
    routing: RoutingPolicy = RoutingPolicy()
    tools: tuple[ToolPolicy, ...] = ()
    tool_runs: ToolRunsPolicy = ToolRunsPolicy()
    mcp_servers: tuple[McpServerGrant, ...] = ()  # upstream MCP servers granted (gateway/mcp)
    tracing: TracingPolicy = TracingPolicy()
