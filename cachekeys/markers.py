"""Provider cache breakpoints: where Lantern puts Anthropic `cache_control` and Bedrock `cachePoint`.

Pure. One plan over the prompt layout (at most 4 breakpoints, the client's kept, the model's
minimum cacheable length and the 20-block look-back respected), applied to canonical requests,
to raw Anthropic bodies, or handed to the Bedrock backend as a plan.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adapters.records import evolve
from adapters.types import JSON, CacheControl, ChatRequest, ContentPart
from cachekeys.layout import Level, PromptLayout

Ttl = Literal["5m", "1h"]
MAX_BREAKPOINTS = 4
LOOKBACK_BLOCKS = 20
# Minimum cacheable prefix by model family, most specific first (Anthropic docs, late 2025).
MIN_CACHEABLE_TOKENS: tuple[tuple[str, int], ...] = (
    ("haiku-4-5", 4096),
    ("opus-4-5", 4096),
    ("opus-4-6", 4096),
    ("haiku", 2048),
    ("sonnet", 1024),
    ("opus", 1024),
)
DEFAULT_MIN_CACHEABLE_TOKENS = 1024


def min_cacheable_tokens(model: str, overrides: Mapping[str, int] | None = None) -> int:
    """The first family whose name is in the model id: policy overrides first, then the table."""
    for family, tokens in overrides.items() if overrides else ():
        if family in model:
            return tokens
    for family, tokens in MIN_CACHEABLE_TOKENS:
        if family in model:
            return tokens
    return DEFAULT_MIN_CACHEABLE_TOKENS


@dataclass(frozen=True, slots=True)
class BreakpointPlan:
    """Block indices (into the layout) that get a Lantern marker, all with `ttl`."""

    indices: tuple[int, ...]
    ttl: Ttl
    min_tokens: int


def client_markers(layout: PromptLayout) -> dict[int, str | None]:
    """Block index -> TTL of each marker the client set."""
    return {i: b.marker_ttl for i, b in enumerate(layout.blocks) if b.marker_ttl is not None}


def plan_breakpoints(
    layout: PromptLayout,
    ttl: Ttl,
    min_tokens: int,
    reserved: int = 0,
    client: Mapping[int, str | None] | None = None,
) -> BreakpointPlan:
    """Candidates by priority: the last stable block of the conversation, the last tool, the last
    system block, then a bridge to the previous call's end when more than 20 blocks lie between.
    `reserved` counts markers the provider adds itself (Anthropic's top-level `cache_control`);
    `client`: `client_markers(layout)`, when the caller has it."""
    if client is None:
        client = client_markers(layout)
    budget = MAX_BREAKPOINTS - len(client) - reserved
    last_message = _markable_at_or_before(layout, layout.last_stable(), "messages")
    levels = [b.level for b in layout.blocks]
    candidates = [
        last_message,
        _markable_at_or_before(layout, _last(levels, "tools"), "tools"),
        _markable_at_or_before(layout, _last(levels, "system"), "system"),
        _bridge(layout, last_message),
    ]
    chosen: list[int] = []
    for index in candidates:
        if budget <= len(chosen) or index < 0 or index in client or index in chosen:
            continue
        if layout.end(index) < min_tokens or _breaks_ttl_order(client, index, ttl):
            continue
        chosen.append(index)
    return BreakpointPlan(tuple(sorted(chosen)), ttl, min_tokens)


def _last(levels: list[Level], level: Level) -> int:
    """`PromptLayout.last_of` over the blocks' levels, read once for both levels."""
    return len(levels) - 1 - levels[::-1].index(level) if level in levels else -1


def _markable_at_or_before(layout: PromptLayout, index: int, level: str) -> int:
    for i in range(index, -1, -1):
        block = layout.blocks[i]
        if block.level != level:
            return -1
        if block.is_markable and not block.is_volatile:
            return i
    return -1


def _bridge(layout: PromptLayout, last_message: int) -> int:
    """The end of the previous call (the turn before the newest assistant message), if the
    look-back from `last_message` cannot reach it."""
    if last_message < LOOKBACK_BLOCKS:  # the look-back reaches the first block
        return -1
    previous_end = _previous_call_end(layout, last_message)
    if previous_end < 0 or last_message - previous_end < LOOKBACK_BLOCKS:
        return -1
    return _markable_at_or_before(layout, previous_end, "messages")


def _previous_call_end(layout: PromptLayout, last_message: int) -> int:
    """Index of the last block before the newest assistant turn (-1 when there is none)."""
    blocks = layout.blocks
    for first_of_turn in range(last_message, -1, -1):  # the newest assistant block, from the end
        block = blocks[first_of_turn]
        if block.level == "messages" and block.role == "assistant":
            break
    else:
        return -1
    while first_of_turn > 0 and blocks[first_of_turn - 1].role == "assistant":
        first_of_turn -= 1
    return first_of_turn - 1


def _breaks_ttl_order(client: Mapping[int, str | None], index: int, ttl: Ttl) -> bool:
    """Longer TTLs must come first: no 5m marker before a client 1h, no 1h after a client 5m."""
    if not client:
        return False
    if ttl == "5m":
        return any(t == "1h" and i > index for i, t in client.items())
    return any(t == "5m" and i < index for i, t in client.items())


# --- applying a plan -----------------------------------------------------------------------------


def apply_to_request(
    request: ChatRequest, layout: PromptLayout, plan: BreakpointPlan, **fields: Any
) -> ChatRequest:
    """The request with a marker on each planned block; one copy of the request for all of them
    (each level and message copied once), not one per marker. `fields`: other fields of the
    request to set in the same copy."""
    if not plan.indices:
        return evolve(request, **fields) if fields else request
    marker = CacheControl(ttl=plan.ttl)
    tools, system = list(request.tools), list(request.system)
    messages: dict[int, list[ContentPart]] = {}
    for index in plan.indices:
        level, i, *rest = layout.blocks[index].locator
        assert isinstance(i, int)
        if level == "tools":
            tools[i] = evolve(tools[i], cache_control=marker)
        elif level == "system":
            system[i] = evolve(system[i], cache_control=marker)
        else:
            parts = messages.get(i)
            if parts is None:
                parts = messages[i] = list(request.messages[i].content)
            k = rest[0]
            assert isinstance(k, int)
            parts[k] = evolve(parts[k], cache_control=marker)
    edits: dict[str, Any] = dict(fields)
    levels = {layout.blocks[index].level for index in plan.indices}
    if "tools" in levels:
        edits["tools"] = tuple(tools)
    if "system" in levels:
        edits["system"] = tuple(system)
    if messages:
        edited = list(request.messages)
        for i, parts in messages.items():
            edited[i] = evolve(edited[i], content=tuple(parts))
        edits["messages"] = tuple(edited)
    return evolve(request, **edits)


def apply_to_anthropic(
    body: Mapping[str, JSON], layout: PromptLayout, plan: BreakpointPlan
) -> dict[str, Any]:
    """Put `cache_control` on the planned blocks of a raw body, copying only what it edits."""
    out = dict(body)
    marker = {"type": "ephemeral", "ttl": plan.ttl}
    for index in plan.indices:
        level, i, *rest = layout.blocks[index].locator
        if level == "tools":
            tools = list(out["tools"])
            tools[i] = {**tools[i], "cache_control": marker}  # type: ignore[index]
            out["tools"] = tools
        elif level == "system":
            out["system"] = _mark_content(out["system"], i, marker)  # type: ignore[arg-type]
        else:
            messages = list(out["messages"])
            message = messages[i]  # type: ignore[index]
            messages[i] = {**message, "content": _mark_content(message["content"], rest[0], marker)}  # type: ignore[index,arg-type]
            out["messages"] = messages
    return out


def _mark_content(content: JSON, index: int | None, marker: Mapping[str, str]) -> JSON:
    if index is None:  # a plain string becomes one text block so it can carry the marker
        return [{"type": "text", "text": content, "cache_control": dict(marker)}]
    parts = list(content)
    parts[index] = {**parts[index], "cache_control": dict(marker)}
    return parts


@dataclass(frozen=True, slots=True)
class BedrockCachePlan:
    """Where the Bedrock backend inserts `{"cachePoint": {"type": "default", "ttl": ttl}}`."""

    after_tools: bool
    after_system: bool
    after_block: tuple[int, int] | None  # (message index, content index) to insert after
    ttl: Ttl


def bedrock_plan(layout: PromptLayout, plan: BreakpointPlan) -> BedrockCachePlan:
    levels = {layout.blocks[i].level: i for i in plan.indices}
    message_indices = [i for i in plan.indices if layout.blocks[i].level == "messages"]
    after_block = None
    if message_indices:
        _, m, k = layout.blocks[message_indices[-1]].locator
        after_block = (int(m or 0), int(k or 0))
    return BedrockCachePlan("tools" in levels, "system" in levels, after_block, plan.ttl)
