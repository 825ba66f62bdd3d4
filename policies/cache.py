"""The `cache:` section of a tenant policy (applied by `cachekeys/` via the gateway)."""

from __future__ import annotations

from typing import Literal

from policies.base import PolicyModel


class CachePolicy(PolicyModel):
    # tenant: keys salted per tenant (default); none: no prompt caching for this tenant
    scope: Literal["tenant", "none"] = "tenant"
    ttl: Literal["5m", "1h"] = "5m"
