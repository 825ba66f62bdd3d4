"""The `limits:` section of a tenant policy (enforced by `quotas/` via the gateway)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.base import PolicyModel


class LimitsPolicy(PolicyModel):
    tokens_per_minute: int | None = Field(default=None, ge=1)
    requests_per_minute: int | None = Field(default=None, ge=1)
    concurrent_requests: int | None = Field(default=None, ge=1)
    max_prompt_tokens: int | None = Field(default=None, ge=1)
    max_output_tokens: int | None = Field(default=None, ge=1)
    calls_per_session: int | None = Field(default=None, ge=1)
    monthly_budget_usd: float | None = Field(default=None, ge=0)
    # what to do when a client asks for more output than max_output_tokens
    on_max_tokens_over: Literal["reject", "clamp"] = "reject"
