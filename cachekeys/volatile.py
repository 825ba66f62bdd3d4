"""Volatile-text relocation: dates, times, ids moved out of tools and system into a trailing block.

Pure: the stable prefix keeps a numbered placeholder, and the values travel in one text block
appended to the newest user turn. Conversation history is never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from adapters.types import JSON

DEFAULT_VOLATILE_PATTERNS: tuple[str, ...] = (
    # ISO-8601 date-times (2026-11-30T09:18:42Z, 2026-11-30 09:18:42.123+01:00)
    r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?",
    r"\b\d{4}-\d{2}-\d{2}\b",  # dates
    r"\b\d{1,2}:\d{2}(?::\d{2})?(?:\s?(?:[AaPp][Mm]\b|[AaPp]\.[Mm]\.))?",  # 15:07, 3:07 PM
    r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",  # UUIDs
    r"\b(?:req|request|msg|call|run|trace|span)[_-][A-Za-z0-9]{8,}\b",  # request and trace ids
    r"\b1[6-9]\d{8}(?:\d{3})?\b",  # Unix epoch seconds or milliseconds (2020s-2030s)
)
PLACEHOLDER = "{{volatile:%d}}"
KEEP_PLACEHOLDER = r"(?P<lantern_placeholder>\{\{volatile:\d+\}\})"
BLOCK_OPEN = "<volatile-context>"
BLOCK_CLOSE = "</volatile-context>"


@dataclass(frozen=True, slots=True)
class VolatileMatcher:
    """One compiled alternation of the tenant's patterns (first) and the defaults."""

    pattern: re.Pattern[str]

    @classmethod
    def build(
        cls, tenant_patterns: Iterable[str] = (), use_defaults: bool = True
    ) -> VolatileMatcher:
        patterns = tuple(tenant_patterns) + (DEFAULT_VOLATILE_PATTERNS if use_defaults else ())
        # an existing placeholder is matched first and kept, so a broad tenant pattern (\d+)
        # never rewrites one: relocation stays idempotent
        alternatives = [KEEP_PLACEHOLDER, *(f"(?:{p})" for p in patterns)]
        return cls(re.compile("|".join(alternatives)))


class Relocator:
    """Replaces volatile values by placeholders, numbering distinct values in order of appearance.

    One instance serves one request: the same value always gets the same placeholder.
    """

    def __init__(self, matcher: VolatileMatcher) -> None:
        self._matcher = matcher
        self._values: dict[str, int] = {}

    def text(self, text: str) -> str:
        return self._matcher.pattern.sub(self._placeholder, text)

    def _placeholder(self, match: re.Match[str]) -> str:
        value = match.group(0)
        if not value or match.group("lantern_placeholder"):
            return value
        number = self._values.setdefault(value, len(self._values) + 1)
        return PLACEHOLDER % number

    def schema(self, schema: JSON) -> JSON:
        """Relocate inside `description` strings of a JSON schema only."""
        if isinstance(schema, Mapping):
            return {
                k: self.text(v) if k == "description" and isinstance(v, str) else self.schema(v)
                for k, v in schema.items()
            }
        if isinstance(schema, list):
            return [self.schema(item) for item in schema]
        return schema

    def block_text(self) -> str | None:
        """The trailing block with every relocated value, or None when nothing moved."""
        if not self._values:
            return None
        lines = [f"{PLACEHOLDER % n} = {value}" for value, n in self._values.items()]
        return "\n".join([BLOCK_OPEN, *lines, BLOCK_CLOSE])


def is_volatile_block(text: str) -> bool:
    return text.startswith(BLOCK_OPEN) and text.endswith(BLOCK_CLOSE)


# --- wire bodies -------------------------------------------------------------------------

SYSTEM_ROLES = ("system", "developer")


def relocate(wire: str, body: Mapping[str, JSON], matcher: VolatileMatcher) -> dict[str, JSON]:
    """Move volatile values out of tools and system into a block on the newest user turn
    (OpenAI: only the leading system turns are system; later ones are conversation history).
    Returns `body` itself when nothing moved."""
    relocator = Relocator(matcher)
    out = dict(body)
    if isinstance(out.get("tools"), list):
        out["tools"] = [_relocate_tool(wire, t, relocator) for t in out["tools"]]
    messages = list(out.get("messages") or [])
    if wire == "anthropic" and "system" in out:
        out["system"] = _relocate_content(out["system"], relocator)
    elif wire == "openai":
        for i, message in enumerate(messages):
            if not (isinstance(message, Mapping) and message.get("role") in SYSTEM_ROLES):
                break
            messages[i] = {
                **message,
                "content": _relocate_content(message.get("content"), relocator),
            }
    block = relocator.block_text()
    if block is None:
        return dict(body)
    out["messages"] = _append_block(messages, block)
    return out


def _relocate_tool(wire: str, tool: JSON, relocator: Relocator) -> JSON:
    if not isinstance(tool, Mapping):
        return tool
    if wire == "openai":
        function = tool.get("function")
        if not isinstance(function, Mapping):
            return tool
        return {**tool, "function": _relocate_fields(function, "parameters", relocator)}
    return _relocate_fields(tool, "input_schema", relocator)


def _relocate_fields(spec: Mapping[str, JSON], schema_key: str, relocator: Relocator) -> JSON:
    out = dict(spec)
    if isinstance(out.get("description"), str):
        out["description"] = relocator.text(out["description"])
    if schema_key in out:
        out[schema_key] = relocator.schema(out[schema_key])
    return out


def _relocate_content(content: JSON, relocator: Relocator) -> JSON:
    if isinstance(content, str):
        return relocator.text(content)
    if isinstance(content, list):
        return [
            {**p, "text": relocator.text(p["text"])}
            if isinstance(p, Mapping) and p.get("type") == "text" and isinstance(p.get("text"), str)
            else p
            for p in content
        ]
    return content


def _append_block(messages: list[JSON], block: str) -> list[JSON]:
    """The newest turn if it is the user's; the user turn before an assistant prefill; else a
    new user turn at the end (after a tool answer or a system note)."""
    part = {"type": "text", "text": block}
    target = len(messages) - 1
    if messages and _role(messages[-1]) == "assistant" and len(messages) > 1:
        target -= 1
    if target < 0 or _role(messages[target]) != "user":
        return [*messages, {"role": "user", "content": [part]}]
    message = messages[target]
    content = message.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])
    return [*messages[:target], {**message, "content": [*parts, part]}, *messages[target + 1 :]]


def _role(message: JSON) -> str | None:
    return message.get("role") if isinstance(message, Mapping) else None
