"""Volatile-text relocation: dates, times, ids moved out of tools and system into a trailing block.

Pure: the stable prefix keeps a numbered placeholder, and the values travel in one text block
appended to the newest user turn. Conversation history is never rewritten.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from adapters.types import JSON, ChatRequest, Message, TextPart

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


# --- canonical types ---------------------------------------------------------------------


def relocate_request(request: ChatRequest, matcher: VolatileMatcher) -> ChatRequest:
    """Move volatile values out of tools and system into a block on the newest user turn."""
    relocator = Relocator(matcher)
    # relocate first, rebuild only if something moved (most calls move nothing)
    tool_parts = [
        (relocator.text(t.description), relocator.schema(t.input_schema)) for t in request.tools
    ]
    system_texts = [relocator.text(p.text) for p in request.system]
    block = relocator.block_text()
    if block is None:
        return request
    tools = tuple(
        replace(t, description=description, input_schema=schema)
        for t, (description, schema) in zip(request.tools, tool_parts, strict=True)
    )
    system = tuple(
        replace(p, text=text) for p, text in zip(request.system, system_texts, strict=True)
    )
    messages = _append_block(request.messages, TextPart(block))
    return replace(request, tools=tools, system=system, messages=messages)


def _append_block(messages: tuple[Message, ...], block: TextPart) -> tuple[Message, ...]:
    """The newest turn if it is the user's; the user turn before an assistant prefill; else a
    new user turn at the end (after a tool answer or a system note)."""
    target = len(messages) - 1
    if messages and messages[-1].role == "assistant" and len(messages) > 1:
        target -= 1
    if target < 0 or messages[target].role != "user":
        return (*messages, Message(role="user", content=(block,)))
    updated = replace(messages[target], content=(*messages[target].content, block))
    return (*messages[:target], updated, *messages[target + 1 :])
