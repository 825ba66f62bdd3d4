"""The `cache:` section of a tenant policy (applied by `cachekeys/` via gateway/core/prompt_cache.py).

Validation only: patterns must compile, public prefixes name exactly one thing. The defaults
keep a prompt's meaning: only bytes (key order) and the place of values that change on every
call move (see docs/cache.md); each can be turned off.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from policies.base import PolicyModel

RelocateMode = Literal["auto", "always", "never"]


class NormalisePolicy(PolicyModel):
    order_tools: bool = True  # tools sorted by name (declared-public tools first)
    canonical_json: bool = True  # JSON schema keys sorted, `required` lists sorted
    canonical_tool_args: bool = True  # tool-call arguments in history: sorted keys, compact
    # values out of tools/system to the tail of the newest user turn. auto: date-times, clock
    # times, UUIDs, ids and epochs from the first call, and the places the autopilot sees change
    # on their own (dates, the tenant's patterns, any shape); always: every pattern from the
    # first call; never: nothing. `true`/`false` read as always/never.
    relocate_volatile: RelocateMode = "auto"
    default_patterns: bool = True  # use Lantern's built-in volatile patterns
    volatile_patterns: tuple[str, ...] = ()  # the tenant's own regular expressions

    @field_validator("relocate_volatile", mode="before")
    @classmethod
    def _from_bool(cls, value: object) -> object:
        if isinstance(value, bool):
            return "always" if value else "never"
        return value

    @field_validator("volatile_patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                compiled = re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"pattern {pattern!r} does not compile: {exc}") from exc
            if compiled.match(""):
                raise ValueError(f"pattern {pattern!r} matches the empty string")
        try:  # Lantern joins them into one alternation: group names must not clash
            re.compile("|".join(f"(?:{p})" for p in ("(?P<lantern_placeholder>x)", *patterns)))
        except re.error as exc:
            raise ValueError(f"patterns cannot be combined: {exc}") from exc
        return patterns


class PublicPrefix(PolicyModel):
    """One segment an admin declares shareable across tenants (hashed without the tenant salt)."""

    tool: str | None = None  # a tool by name
    tool_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # canonical tool
    system_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")  # a system block

    @model_validator(mode="after")
    def _exactly_one(self) -> PublicPrefix:
        named = [v for v in (self.tool, self.tool_sha256, self.system_sha256) if v is not None]
        if len(named) != 1:
            raise ValueError("name exactly one of tool, tool_sha256, system_sha256")
        return self


class MinimumCacheable(PolicyModel):
    """A model family's minimum cacheable prefix, overriding Lantern's built-in table."""

    family: str = Field(min_length=1)  # matched as a substring of the model id
    tokens: int = Field(ge=1)


class CachePolicy(PolicyModel):
    # tenant: keys salted per tenant (default); shared: no salt (tenants share keys and caches);
    # none: no prompt caching for this tenant (no markers, no prompt_cache_key)
    scope: Literal["tenant", "shared", "none"] = "tenant"
    # auto: per session, 5 min or 1 h by expected cost from the gaps between its calls
    ttl: Literal["5m", "1h", "auto"] = "auto"
    markers: Literal["auto", "off"] = "auto"  # Lantern places provider cache breakpoints
    # opt-in: before a hot session's entry expires, resend its last prompt for one output token
    # when that is expected to cost less than a rewrite (cachekeys/keep_warm.py); the tenant pays
    keep_warm: bool = False
    normalise: NormalisePolicy = NormalisePolicy()
    public_prefixes: tuple[PublicPrefix, ...] = ()
    min_cacheable_tokens: tuple[MinimumCacheable, ...] = ()

    @model_validator(mode="after")
    def _warm_needs_a_cache(self) -> CachePolicy:
        if self.keep_warm and self.scope == "none":
            raise ValueError("keep_warm needs prompt caching: scope none caches nothing to keep")
        return self
