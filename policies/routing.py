"""The `routing:` section of a tenant policy (read by `adapters/router.py`)."""

from __future__ import annotations

from typing import Literal

from policies.base import PolicyModel


class RoutingPolicy(PolicyModel):
    venue: Literal["cheapest", "selfhost_only", "api_only"] = "cheapest"
