"""A tenant's policy: the frozen, validated form of `policy_dir/<tenant>.yaml`."""

from __future__ import annotations

from pydantic import Field

from policies.base import PolicyModel
from policies.cache import CachePolicy
from policies.limits import LimitsPolicy
from policies.routing import RoutingPolicy
from policies.tools import ToolPolicy


class ApiKeyEntry(PolicyModel):
    id: str = Field(min_length=1)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class TenantPolicy(PolicyModel):
    tenant: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    name: str = ""
    api_keys: tuple[ApiKeyEntry, ...] = ()
    models: tuple[str, ...] = ()
    backends: tuple[str, ...] | None = None  # allowed backend names; None: all
    limits: LimitsPolicy = LimitsPolicy()
    cache: CachePolicy = CachePolicy()
    routing: RoutingPolicy = RoutingPolicy()
    tools: tuple[ToolPolicy, ...] = ()
