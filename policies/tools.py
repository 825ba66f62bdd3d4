"""The `tools:` section of a tenant policy (run by `sandbox/` via the gateway)."""

from __future__ import annotations

from typing import Literal

from policies.base import PolicyModel


class ToolLimits(PolicyModel):
    wall_s: float = 30
    memory_mb: int = 256
    cpu_s: float = 10
    output_kb: int = 64


class ToolPolicy(PolicyModel):
    name: str
    runner: Literal["local", "fargate"] = "local"
    command: tuple[str, ...]
    egress: tuple[str, ...] = ()
    limits: ToolLimits = ToolLimits()
