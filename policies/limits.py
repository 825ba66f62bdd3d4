"""The `limits:` section of a tenant policy (enforced by `quotas/` via the gateway).

Pure, validated values; the gateway maps them onto `quotas.Limits` (gateway/core/admission.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.base import PolicyModel

StoreDownMode = Literal["fail_open", "fail_closed"]


class TokenWeights(PolicyModel):
    """How cache reads and writes count toward `tokens_per_minute` (1.0: like any input token)."""

    cache_read: float = Field(default=1.0, ge=0, le=10)
    cache_write: float = Field(default=1.0, ge=0, le=10)


class StoreDownPolicy(PolicyModel):
    """When the shared quota store (Redis) is down: `fail_open` admits on a per-process store
    (logged, metric raised), `fail_closed` answers 503."""

    rates: StoreDownMode = "fail_open"
    budget: StoreDownMode = "fail_closed"


class LimitsPolicy(PolicyModel):
    tokens_per_minute: int | None = Field(default=None, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    concurrent_requests: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    calls_per_session: int | None = Field(default=None, ge=1)
    monthly_budget_usd: float | None = Field(default=None, ge=0)
    # what to do when a client asks for more output than max_output_tokens: clamp (the
    # default: SDKs send 32k-64k as a matter of course) names the value in a reply header
    on_max_tokens_over: Literal["reject", "clamp"] = "clamp"
    token_weights: TokenWeights = TokenWeights()
    # spend / monthly_budget_usd at which the alarm fires (log, metric, optional webhook)
    budget_alarm_ratio: float = Field(default=0.8, gt=0, le=1)
    budget_alarm_webhook: str | None = Field(default=None, pattern=r"^https?://\S+$")
    on_store_down: StoreDownPolicy = StoreDownPolicy()
    # a reservation whose gateway process died is released after this long
    lease_s: float = Field(default=900.0, gt=0, le=86_400)
    # calls_per_session counts the calls of a session until it has been idle this long
    session_ttl_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)
    # MCP tool calls (gateway/mcp, counted per gateway process): per 60 s window, and at once
    tool_calls_per_minute: int | None = Field(default=None, ge=1)
    concurrent_tool_calls: int | None = Field(default=None, ge=1)
