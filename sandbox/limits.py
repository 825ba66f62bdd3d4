"""Limits and command lines: requested limits within the policy's, placeholders into argv.

Arguments become whole argv elements; nothing here ever goes through a shell.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from sandbox.errors import InvalidToolRequest
from sandbox.types import ToolLimits

MAX_ARGUMENT_BYTES = 256 * 1024
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}|[{}]")


def resolve_limits(policy: ToolLimits, requested: ToolLimits | None) -> ToolLimits:
    """The requested limits, each no larger than the policy's; absent request: the policy's."""
    if requested is None:
        return policy
    for item in dataclasses.fields(ToolLimits):
        asked = getattr(requested, item.name)
        allowed = getattr(policy, item.name)
        if asked <= 0:
            raise InvalidToolRequest(f"limits.{item.name}", "must be positive")
        if asked > allowed:
            raise InvalidToolRequest(
                f"limits.{item.name}", f"{asked} exceeds the policy's {allowed}"
            )
    return requested


def placeholders(command: tuple[str, ...]) -> frozenset[str]:
    found: set[str] = set()
    for element in command:
        found.update(m.group(1) for m in _PLACEHOLDER.finditer(element) if m.group(1))
    return frozenset(found)


def fill_command(command: tuple[str, ...], arguments: Mapping[str, str]) -> tuple[str, ...]:
    """Each `{name}` replaced by its argument; `{{`/`}}` are literal braces."""
    wanted = placeholders(command)
    unknown = sorted(set(arguments) - wanted)
    if unknown:
        raise InvalidToolRequest(f"arguments.{unknown[0]}", "not a parameter of this tool")
    missing = sorted(wanted - set(arguments))
    if missing:
        raise InvalidToolRequest(f"arguments.{missing[0]}", "required")
    total = 0
    for name, value in arguments.items():
        if "\x00" in value:
            raise InvalidToolRequest(f"arguments.{name}", "contains a NUL byte")
        total += len(value.encode())
    if total > MAX_ARGUMENT_BYTES:
        raise InvalidToolRequest("arguments", f"larger than {MAX_ARGUMENT_BYTES} bytes")
    return tuple(_fill(element, arguments) for element in command)


def _fill(element: str, arguments: Mapping[str, str]) -> str:
    def substitute(match: re.Match[str]) -> str:
        token = match.group(0)
        if token in ("{{", "}}"):
            return token[0]
        if match.group(1) is None:
            raise InvalidToolRequest("command", f"stray brace in {element!r}")
        return arguments[match.group(1)]

    return _PLACEHOLDER.sub(substitute, element)


def rlimit_spec(limits: ToolLimits) -> dict[str, int]:
    """rlimits for the launcher, by resource name (soft = hard)."""
    return {
        "RLIMIT_AS": limits.memory_mb * 1024 * 1024,
        "RLIMIT_CPU": max(1, int(limits.cpu_s + 0.999)),
        "RLIMIT_NPROC": limits.max_procs,
        "RLIMIT_FSIZE": limits.file_mb * 1024 * 1024,
        "RLIMIT_NOFILE": 256,
        "RLIMIT_CORE": 0,
    }
