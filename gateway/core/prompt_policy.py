"""A tenant's `cache:` policy as cachekeys takes it: the normalise options, the public prefix
and the cache salt. Pure; built once per tenant policy by the caller (gateway/core/prompt_cache.py
keeps them per policy object).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from cachekeys.blockhash import tenant_salt
from cachekeys.canonical import SchemaMemo
from cachekeys.normalise import NormaliseOptions, PublicPrefix
from cachekeys.volatile import VolatileMatcher
from policies.cache import CachePolicy


def normalise_options(
    policy: CachePolicy,
    schemas: SchemaMemo | None = None,
    learned: Sequence[str] = (),
    frozen: Mapping[str, str] | None = None,
) -> NormaliseOptions:
    """The tenant's `cache:` section as cachekeys options; `learned`: the patterns of the places
    the autopilot learnt for the tenant (relocated under `auto`); `frozen`: learnt pattern ->
    the value kept in its place (the session that learnt it). Build once per tenant policy
    (and learnt set): the matcher's scan memo is the tenant's own."""
    n = policy.normalise
    mode = n.relocate_volatile
    if mode == "always":
        matcher = VolatileMatcher.build(n.volatile_patterns, n.default_patterns, None, learned)
    elif n.default_patterns:
        matcher = VolatileMatcher.per_call(n.volatile_patterns, learned, frozen)
    else:
        matcher = VolatileMatcher.build((), False, None, learned, frozen)
    return NormaliseOptions(
        n.order_tools,
        n.canonical_json,
        n.canonical_tool_args,
        mode != "never",
        matcher,
        public_prefix(policy),
        schemas,
    )


def public_prefix(policy: CachePolicy) -> PublicPrefix:
    """What the tenant's `cache.public_prefixes` declares shareable across tenants."""
    prefixes = policy.public_prefixes
    return PublicPrefix(
        tool_names=frozenset(p.tool for p in prefixes if p.tool),
        tool_sha256=frozenset(p.tool_sha256 for p in prefixes if p.tool_sha256),
        system_sha256=frozenset(p.system_sha256 for p in prefixes if p.system_sha256),
    )


def salt_for(
    policy: CachePolicy,
    secret: bytes,
    tenant_id: str,
    hmac: Callable[[bytes, str], str] = tenant_salt,
) -> str:
    """The tenant's cache salt: none under a shared scope, else `hmac(secret, tenant_id)`
    (`tenant_salt`, or a memo of it)."""
    return "" if policy.scope == "shared" else hmac(secret, tenant_id)
