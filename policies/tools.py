"""The `tools:` and `tool_runs:` sections of a tenant policy (run by `sandbox/` via the gateway).

Validates the declaration only (names, argv, egress syntax, Fargate fields, the tenant's cap
on concurrent runs, how the tool is described to an MCP client); it decides nothing about
running. An egress entry is `host[:port]` (default port 443) or `*.suffix[:port]`.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from policies.base import PolicyModel

_HOST = re.compile(
    r"^(\*\.)?([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
)
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$")  # inet_aton spellings end so
# the `{name}` placeholders of a command, as `sandbox.limits` fills them (`{{`/`}}`: literal)
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
_FARGATE_REQUIRED = (
    "cluster",
    "task_definition",
    "subnets",
    "security_groups",
    "task_role_arn",
    "log_group",
)


class ToolLimits(PolicyModel):
    wall_s: float = Field(default=30, gt=0, le=24 * 3600)
    memory_mb: int = Field(default=256, gt=0)
    cpu_s: float = Field(default=10, gt=0)
    output_kb: int = Field(default=64, gt=0, le=16 * 1024)
    max_procs: int = Field(default=64, gt=0)
    file_mb: int = Field(default=64, gt=0)


class ToolRunsPolicy(PolicyModel):
    """The tenant's tool runs as a whole: at most `max_concurrent` going at once (the next
    one is answered 429 with Retry-After, before anything starts)."""

    max_concurrent: int = Field(default=4, ge=1, le=256, strict=True)


class ToolArgument(PolicyModel):
    """How one `{placeholder}` of the command is described to a client (its JSON schema); the
    value still reaches the tool as text in its argv element."""

    type: Literal["string", "integer", "number"] = "string"
    description: str = ""
    enum: tuple[str | int | float, ...] = ()


class ToolPolicy(PolicyModel):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,128}$")
    runner: Literal["local", "fargate"] = "local"
    command: tuple[str, ...] = Field(min_length=1)
    description: str = ""  # what an MCP client (and its model) is told the tool does
    arguments: dict[str, ToolArgument] = {}  # keyed by placeholder; absent: a plain string
    egress: tuple[str, ...] = ()
    limits: ToolLimits = ToolLimits()
    # Fargate only (runner: fargate). The image is pinned by the task definition; `image`
    # records the digest it should have, and enters the idempotency fingerprint.
    image: str = ""
    cluster: str = ""
    task_definition: str = ""
    container_name: str = "tool"
    subnets: tuple[str, ...] = ()
    security_groups: tuple[str, ...] = ()
    task_role_arn: str = ""
    log_group: str = ""
    log_stream_prefix: str = "tool"
    proxy_url: str = ""  # the egress proxy as the task reaches it, e.g. http://10.0.9.5:3128

    @field_validator("egress")
    @classmethod
    def _egress_entries(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        for entry in entries:
            host, sep, port = entry.rpartition(":")
            host = host if sep else entry
            if sep and not (port.isdigit() and 0 < int(port) < 65536):
                raise ValueError(f"{entry!r}: port must be 1-65535")
            if not _HOST.match(host.lower()) or _NUMERIC_LABEL.match(
                host.lower().rsplit(".", 1)[-1]
            ):
                raise ValueError(f"{entry!r}: a host name or '*.suffix' (IP addresses not allowed)")
        return entries

    def placeholder_names(self) -> tuple[str, ...]:
        """The command's placeholders, each once, in the order they first appear."""
        found = (m.group(1) for part in self.command for m in _PLACEHOLDER.finditer(part))
        return tuple(dict.fromkeys(name for name in found if name))

    @model_validator(mode="after")
    def _arguments_are_placeholders(self) -> ToolPolicy:
        unknown = sorted(set(self.arguments) - set(self.placeholder_names()))
        if unknown:
            raise ValueError(f"arguments.{unknown[0]}: not a placeholder of the command")
        return self

    @model_validator(mode="after")
    def _runner_fields(self) -> ToolPolicy:
        if self.runner == "fargate":
            missing = [name for name in _FARGATE_REQUIRED if not getattr(self, name)]
            if missing:
                raise ValueError(f"runner fargate needs {', '.join(missing)}")
        return self
