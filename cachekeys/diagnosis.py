"""Cache-break explanations: compare one call's prompt with the previous call of its session.

Pure: fingerprints in, a diagnosis out; time is passed in. Says whether the prefix the previous
call left in the cache is intact, and if not the first block that changed and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import accumulate
from typing import Literal

from adapters.records import slot_init
from adapters.types import ChatRequest
from cachekeys.layout import Locator, PromptBlock, PromptLayout
from cachekeys.volatile_probe import BlockProbe

CacheMode = Literal["breakpoints", "automatic"]  # Anthropic/Bedrock markers, OpenAI implicit
LEVEL_ORDER = {"tools": 0, "system": 1, "messages": 2}
AUTOMATIC_MIN_TOKENS = 1024
AUTOMATIC_INCREMENT = 128


class Reason(StrEnum):
    FIRST_CALL = "first_call"
    KEPT = "kept"
    TOOLS_CHANGED = "tools_changed"
    SYSTEM_CHANGED = "system_changed"
    HISTORY_REWRITTEN = "history_rewritten"
    MODEL_CHANGED = "model_changed"
    OPTIONS_CHANGED = "options_changed"  # tool_choice, thinking, reasoning effort: messages level
    TTL_EXPIRED = "ttl_expired"
    VOLATILE_BLOCK = "volatile_block"  # a tools/system block differing only by volatile values


@slot_init
@dataclass(frozen=True, slots=True)
class PromptFingerprint:
    """What diagnosis needs of a call: stable block identities, their ends in tokens, breakpoints.
    Compared only with the previous call of the same session, which is always the same tenant's."""

    model: str
    digests: tuple[bytes, ...]
    levels: tuple[str, ...]
    names: tuple[str, ...]
    ends: tuple[int, ...]  # cumulative token end of each block
    breakpoints: tuple[int, ...]  # block indices where this call leaves a cache entry
    mode: CacheMode
    ttl_s: float
    options: bytes = b""  # `options_digest` of the call
    masked: tuple[bytes, ...] = ()  # per block, the digest with volatile values masked
    patterns: tuple[str, ...] = ()  # per block, the first volatile pattern in it ("" none)

    @classmethod
    def of(
        cls,
        layout: PromptLayout,
        model: str,
        marked: tuple[int, ...],
        mode: CacheMode,
        ttl_s: float,
        options: bytes = b"",
        probes: Sequence[BlockProbe] = (),
    ) -> PromptFingerprint:
        """`probes`: the autopilot's, per block (their masked digests and patterns are kept)."""
        n = layout.last_stable() + 1
        blocks = layout.blocks[:n]
        # list comprehensions, not generators: a call makes several per-block tuples
        client = tuple([i for i, b in enumerate(blocks) if b.marker_ttl is not None])
        return cls(
            model,
            tuple([b.digest for b in blocks]),
            tuple([b.level for b in blocks]),
            block_names(blocks),
            tuple(accumulate(layout.tokens[:n])),
            tuple(sorted(set(marked) | set(client))),
            mode,
            ttl_s,
            options,
            tuple([p.masked for p in probes[:n]]),
            tuple([p.pattern for p in probes[:n]]),
        )

    @property
    def stable_tokens(self) -> int:
        return self.ends[-1] if self.ends else 0

    def head_tokens(self) -> int:
        """Tokens of the tools and system blocks (`cachekeys.keys.head_tokens` of the layout: a
        layout puts them first, and only a message block is ever volatile)."""
        levels = self.levels
        n = levels.index("messages") if "messages" in levels else len(levels)
        return self.ends[n - 1] if n else 0

    def cached_end(self, upto: int) -> int:
        """Tokens this call left cached within its first `upto` blocks."""
        if self.mode == "automatic":
            return _automatic_tokens(self.ends[upto - 1] if upto else 0)
        points = [self.ends[b] for b in self.breakpoints if b < upto]
        return max(points, default=0)


_NAMES: dict[Locator, str] = {}  # a block's name by its locator (its only input)
MAX_NAMES = 4096


def block_names(blocks: Sequence[PromptBlock]) -> tuple[str, ...]:
    """Each block's `name`, from a memo by locator: an agent's calls name the same blocks, and
    a name costs a call (a property) and string building."""
    names = _NAMES
    found = tuple([names.get(b.locator) for b in blocks])
    if None not in found:
        return found  # type: ignore[return-value]
    if len(names) > MAX_NAMES:
        names.clear()
    for b in blocks:
        if b.locator not in names:
            names[b.locator] = b.name
    return tuple([names[b.locator] for b in blocks])


def _automatic_tokens(common: int) -> int:
    if common < AUTOMATIC_MIN_TOKENS:
        return 0
    return (
        AUTOMATIC_MIN_TOKENS
        + (common - AUTOMATIC_MIN_TOKENS) // AUTOMATIC_INCREMENT * AUTOMATIC_INCREMENT
    )


@slot_init
@dataclass(frozen=True, slots=True)
class CacheDiagnosis:
    reason: Reason
    kept: bool  # the whole prefix the previous call left cached is intact and alive
    stable_prefix_tokens: int  # this call's stable prefix
    expected_prefix_tokens: int  # what the previous call left cached
    predicted_read_tokens: int  # what the provider should report as cache reads
    first_changed: str | None = None  # e.g. "system[0]", "messages[3][1]"
    gap_s: float | None = None
    pattern: str | None = None  # volatile_block: the volatile pattern found in the block

    def as_dict(self) -> dict[str, object]:
        return {
            "reason": self.reason.value,
            "kept": self.kept,
            "stable_prefix_tokens": self.stable_prefix_tokens,
            "expected_prefix_tokens": self.expected_prefix_tokens,
            "predicted_read_tokens": self.predicted_read_tokens,
            "first_changed": self.first_changed,
            "gap_s": self.gap_s,
            "pattern": self.pattern,
        }


def diagnose(
    previous: PromptFingerprint | None,
    previous_at_s: float | None,
    current: PromptFingerprint,
    now_s: float,
) -> CacheDiagnosis:
    stable = current.stable_tokens
    if previous is None or previous_at_s is None:
        return CacheDiagnosis(Reason.FIRST_CALL, False, stable, 0, 0)
    gap_s = now_s - previous_at_s
    expected = previous.cached_end(len(previous.digests))
    if previous.model != current.model:
        return CacheDiagnosis(Reason.MODEL_CHANGED, False, stable, expected, 0, None, gap_s)
    changed = _first_difference(previous, current)
    if changed is not None:
        reason, name = _explain(previous, current, changed)
        read = 0 if gap_s > previous.ttl_s else previous.cached_end(changed)
        pattern = _volatile_pattern(previous, current, changed)
        if pattern is not None:
            reason = Reason.VOLATILE_BLOCK
        return CacheDiagnosis(reason, False, stable, expected, read, name, gap_s, pattern)
    if gap_s > previous.ttl_s:
        return CacheDiagnosis(Reason.TTL_EXPIRED, False, stable, expected, 0, None, gap_s)
    if previous.options != current.options:  # the provider keeps tools and system only
        first_message = next(
            (i for i, lv in enumerate(previous.levels) if lv == "messages"), len(previous.levels)
        )
        read = previous.cached_end(first_message)
        return CacheDiagnosis(
            Reason.OPTIONS_CHANGED, False, stable, expected, read, "messages", gap_s
        )
    return CacheDiagnosis(Reason.KEPT, True, stable, expected, expected, None, gap_s)


CACHE_OPTIONS = ("thinking", "reasoning_effort", "reasoning")  # the `extra` keys that count


def _options_json_digest(options: dict[str, object]) -> bytes:
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).digest()


# most calls set none of them: the digest of all four None, worked out once
NO_OPTIONS_DIGEST = _options_json_digest(dict.fromkeys(("tool_choice", *CACHE_OPTIONS)))


def options_digest(request: ChatRequest) -> bytes:
    """Request options whose change invalidates the cached messages (Anthropic's table:
    tool_choice, thinking; OpenAI: reasoning effort)."""
    extra = request.extra
    if request.tool_choice is None and (
        extra.keys().isdisjoint(CACHE_OPTIONS) or all(extra.get(k) is None for k in CACHE_OPTIONS)
    ):
        return NO_OPTIONS_DIGEST
    options = {"tool_choice": request.tool_choice, **{k: extra.get(k) for k in CACHE_OPTIONS}}
    return _options_json_digest(options)


def _first_difference(previous: PromptFingerprint, current: PromptFingerprint) -> int | None:
    if current.digests[: len(previous.digests)] == previous.digests:
        return None  # the common case (a session's next turn), compared in one go
    for i, digest in enumerate(previous.digests):
        if i >= len(current.digests) or current.digests[i] != digest:
            return i
    return None


def _volatile_pattern(
    previous: PromptFingerprint, current: PromptFingerprint, index: int
) -> str | None:
    """The pattern, when the block at `index` differs only by volatile values (equal masked
    digests of a tools/system block); None otherwise."""
    if index >= min(len(previous.masked), len(current.masked)):
        return None
    if current.levels[index] == "messages" or previous.masked[index] != current.masked[index]:
        return None
    return current.patterns[index] or previous.patterns[index] or "volatile"


def _explain(
    previous: PromptFingerprint, current: PromptFingerprint, index: int
) -> tuple[Reason, str]:
    """The earlier level of the two blocks at `index` names the change (an added tool shifts a
    system block into its place, and the change is still a tools change)."""
    level, name = previous.levels[index], previous.names[index]
    if index < len(current.levels) and LEVEL_ORDER[current.levels[index]] < LEVEL_ORDER[level]:
        level, name = current.levels[index], current.names[index]
    return _REASON_OF_LEVEL.get(level, Reason.HISTORY_REWRITTEN), name


_REASON_OF_LEVEL = {"tools": Reason.TOOLS_CHANGED, "system": Reason.SYSTEM_CHANGED}
