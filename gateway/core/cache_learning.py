"""What the cache autopilot learnt per tenant: the places in a system prompt or a tool
description whose value changes between calls (cachekeys/volatile_learn.py), relocated from then
on for the tenant's calls; and, for the session that taught a place, the value kept in it.

Per process and bounded: at most `max_places` per tenant (the oldest dropped first), at most
`MAX_FROZEN` teaching sessions per tenant and `max_tenants` tenants; the head texts the learning
compares are kept in memory only (never written anywhere), bounded by count and characters, and
read only for the same tenant. With Redis the places are also shared (gateway/core/
cache_learning_shared.py): this table is then each process's near copy.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.types import ChatRequest, TextPart
from cachekeys.layout import PromptBlock
from cachekeys.tenant_table import TenantTable

MAX_PLACES = 32
MAX_TENANTS = 10_000
MAX_FROZEN = 32  # sessions per tenant that keep the value of the place they taught
MAX_PATTERN_CHARS = 512  # a learnt pattern is two escaped contexts and a value class
MAX_TEXTS = 4096
MAX_TEXT_CHARS = 16_000_000


@dataclass(slots=True)
class TenantPlaces:
    patterns: tuple[str, ...] = ()
    # a teaching session (its first message's key) -> learnt pattern -> the value kept in place
    frozen: OrderedDict[bytes, dict[str, str]] = field(default_factory=OrderedDict)


class LearnedPlaces:
    """Each tenant's learnt patterns, in the order learnt (the matcher tries them first).
    `version` moves on every change (a caller compares it instead of the patterns);
    `observer`, when set, is told of each place learnt in this process (to share it)."""

    def __init__(self, max_places: int = MAX_PLACES, max_tenants: int = MAX_TENANTS) -> None:
        self.tenants: OrderedDict[str, TenantPlaces] = OrderedDict()
        self.version = 0
        self.observer: Callable[[str, str], None] | None = None
        self._max_places = max_places
        self._max_tenants = max_tenants

    def patterns(self, tenant: str) -> tuple[str, ...]:
        found = self.tenants.get(tenant)
        return () if found is None else found.patterns

    def add(self, tenant: str, pattern: str) -> bool:
        """True when the pattern is new for the tenant."""
        places = self._tenant(tenant)
        if pattern in places.patterns:
            return False
        places.patterns = (*places.patterns, pattern)[-self._max_places :]
        self.version += 1
        if self.observer is not None:
            self.observer(tenant, pattern)
        return True

    def merge(self, tenant: str, shared: tuple[str, ...]) -> bool:
        """Add the places another process learnt (`shared`, oldest first); patterns that do not
        compile or are too long are left out. True when something was added."""
        places = self._tenant(tenant)
        new = tuple(p for p in shared if p not in places.patterns and is_sound_pattern(p))
        if not new:
            return False
        places.patterns = (*places.patterns, *new)[-self._max_places :]
        self.version += 1
        return True

    def freeze(self, tenant: str, session: bytes, pattern: str, value: str) -> None:
        """The session that taught `pattern` keeps `value` in its place from now on."""
        frozen = self._tenant(tenant).frozen
        frozen.setdefault(session, {})[pattern] = value
        frozen.move_to_end(session)
        while len(frozen) > MAX_FROZEN:
            frozen.popitem(last=False)
        self.version += 1

    def frozen(self, places: TenantPlaces, session: bytes) -> Mapping[str, str] | None:
        """The values `session` keeps in place, among those still learnt."""
        kept = places.frozen.get(session)
        if kept is None:
            return None
        return {p: v for p, v in kept.items() if p in places.patterns} or None

    def _tenant(self, tenant: str) -> TenantPlaces:
        places = self.tenants.pop(tenant, None) or TenantPlaces()
        self.tenants[tenant] = places
        while len(self.tenants) > self._max_tenants:
            self.tenants.popitem(last=False)
        return places


def is_sound_pattern(pattern: str) -> bool:
    if len(pattern) > MAX_PATTERN_CHARS:
        return False
    try:
        re.compile(pattern)
    except re.error:
        return False
    return True


def session_key(request: ChatRequest) -> bytes:
    """A session's key for its frozen places: its first message's text, which relocation never
    edits after the first call (the volatile tail goes to the newest user turn)."""
    first = request.messages[0].content if request.messages else ()
    h = hashlib.sha256()
    for part in first:
        if isinstance(part, TextPart):
            h.update(part.text.encode("utf-8", "surrogatepass"))
            h.update(b"\0")
    return h.digest()


class HeadTexts:
    """The text of head blocks (tools, system) by (tenant, block digest): the previous call's
    version of a block that changed, for the learner to compare. Bounded by count and by
    characters as a `TenantTable`: one tenant's flood of new prompts never takes another's
    texts while it holds more."""

    def __init__(self, max_entries: int = MAX_TEXTS, max_chars: int = MAX_TEXT_CHARS) -> None:
        self._texts: TenantTable[bytes, str] = TenantTable(
            max_entries, weigh=len, max_weight=max_chars
        )

    def get(self, tenant: str, digest: bytes) -> str | None:
        return self._texts.entries(tenant).get(digest)

    def put_head(self, tenant: str, blocks: Sequence[PromptBlock]) -> None:
        """The texts of the tools and system blocks at the head of `blocks` not held yet (one
        call a prompt: a head seen before is not stored again)."""
        held = self._texts.entries(tenant)
        for block in blocks:  # tools, then system, then messages
            if block.level == "messages":
                return
            if block.digest not in held:
                self.put(tenant, block.digest, block.text)
                held = self._texts.entries(tenant)

    def put(self, tenant: str, digest: bytes, text: str) -> None:
        self._texts[(tenant, digest)] = text

    def num_entries(self, tenant: str) -> int:
        return self._texts.num_entries(tenant)
