"""Volatile text left in place: which tools and system blocks carry values that change per call.

Pure apart from a bounded memo. A block's *masked* digest hashes its text with every volatile
value replaced, so two calls whose system prompts differ only by a timestamp have equal masked
digests: the session is recognised, and the break is named `volatile_block` with its pattern.
Never rewrites what is sent (that is relocation's job, cachekeys/relocation.py).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass

from adapters.records import slot_init
from cachekeys.layout import PromptBlock
from cachekeys.volatile import DEFAULT_PATTERN_NAMES, DEFAULT_VOLATILE_PATTERNS

# Values that differ on every call of a session as soon as they appear (a date, or a clock time
# alone, may well stay put for a whole session): a first call does not write past them.
PRESUMED_VOLATILE = frozenset({"iso_datetime", "uuid", "request_id", "epoch"})
MASK = "\0volatile\0"
HEAD_LEVELS = ("tools", "system")


@slot_init
@dataclass(frozen=True, slots=True)
class BlockProbe:
    """One block seen through the volatile patterns."""

    masked: bytes  # digest of the block with every volatile value masked (== digest when none)
    pattern: str = ""  # the first pattern that matched ("" when none)

    @property
    def is_presumed_volatile(self) -> bool:
        return self.pattern in PRESUMED_VOLATILE


class VolatileProbe:
    """Named patterns (the tenant's first, as `tenant[i]`, then Lantern's) and a memo of
    probes by block digest; keeps digests and pattern names only, never text."""

    def __init__(
        self,
        tenant_patterns: Iterable[str] = (),
        use_defaults: bool = True,
        max_entries: int = 8192,
    ) -> None:
        named = [(f"tenant[{i}]", p) for i, p in enumerate(tenant_patterns)]
        if use_defaults:
            named += list(zip(DEFAULT_PATTERN_NAMES, DEFAULT_VOLATILE_PATTERNS, strict=True))
        self._patterns = tuple((name, re.compile(p)) for name, p in named)
        self._any = re.compile("|".join(f"(?:{p})" for _, p in named)) if named else None
        # a pure memo of small fixed-size values (a lost entry costs a probe): an entry bound
        self._memo: dict[bytes, BlockProbe] = {}
        self._max_entries = max_entries

    def probe(self, block: PromptBlock) -> BlockProbe:
        """Messages are history, never masked: their probe is their digest."""
        if block.level not in HEAD_LEVELS or self._any is None:
            return BlockProbe(block.digest)
        found = self._memo.get(block.digest)
        if found is None:
            found = self._probe_text(block)
            if len(self._memo) >= self._max_entries:
                self._memo.clear()  # a bound, as the other per-process memos
            self._memo[block.digest] = found
        return found

    def probes(self, blocks: Iterable[PromptBlock]) -> tuple[BlockProbe, ...]:
        """`probe` of each block, in line for messages and memo hits (every call probes all its
        blocks, and nearly all are one or the other)."""
        memo, out = self._memo, []
        for block in blocks:
            if block.level not in HEAD_LEVELS:
                out.append(BlockProbe(block.digest))
                continue
            found = memo.get(block.digest)
            out.append(self.probe(block) if found is None else found)
        return tuple(out)

    def _probe_text(self, block: PromptBlock) -> BlockProbe:
        assert self._any is not None
        masked_text, count = self._any.subn(MASK, block.text)
        if count == 0:
            return BlockProbe(block.digest)
        pattern = next((name for name, p in self._patterns if p.search(block.text)), "")
        masked = hashlib.sha256(b"masked\0" + masked_text.encode("utf-8")).digest()
        return BlockProbe(masked, pattern)
