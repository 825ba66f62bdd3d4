"""The `routing:` section of a tenant policy (read by `routing/decision.py`).

Venue pinning and the knobs of session affinity and break-even venue
choice. Pure data: the decision itself lives in the router.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from policies.base import PolicyModel

Venue = Literal["cheapest", "selfhost_only", "api_only"]


class RoutingPolicy(PolicyModel):
    # cheapest: fill self-hosted replicas up to their headroom, overflow to APIs;
    # selfhost_only: data residency, never an API; api_only: never a self-hosted replica
    venue: Venue = "cheapest"
    # a session leaves its replica when staying predicts this much more TTFT than the best other
    # (half the default TTFT SLO; llm-d uses 5 s at GPU scale; bench/fleet_sim/ compares)
    stickiness_gate_s: float = Field(default=1.0, ge=0)
    # prefer the longest prefix match among replicas this close to the fastest predicted TTFT
    # (keeps shared prompts on few replicas instead of copying them everywhere)
    affinity_slack_s: float = Field(default=0.5, ge=0)
    # a new session goes to a replica only below this utilisation and predicted TTFT
    headroom_util: float = Field(default=0.65, gt=0, le=1)
    ttft_slo_s: float = Field(default=2.0, gt=0)
    # a session on an API comes back to the fleet only below headroom_util - venue_hysteresis
    venue_hysteresis: float = Field(default=0.15, ge=0, le=1)
    # across APIs, leave the provider holding the warm cache only for this relative saving
    provider_margin: float = Field(default=0.10, ge=0, le=1)
    # a session entry (and the API prompt cache it stands for) is cold after this long idle
    session_ttl_s: float = Field(default=300.0, gt=0)
    # probability of routing a session-less request to a random eligible replica (exploration)
    exploration: float = Field(default=0.0, ge=0, le=1)
    # at a replica's capacity (`max_in_flight`), calls wait in per-tenant queues served in
    # weighted fair order: this tenant's weight, and the longest it waits before a 429
    queue_weight: float = Field(default=1.0, gt=0, le=1000)
    max_queue_ms: int = Field(default=5000, ge=0, le=600_000)
