"""What the cache autopilot learnt per tenant: the places in a system prompt whose value changes
between calls (cachekeys/volatile_learn.py), relocated from then on for the tenant's calls.

Per process and bounded: at most `max_places` per tenant (the oldest dropped first) and
`max_tenants` tenants; the system texts the learning compares are kept in memory only (never
written anywhere), bounded by count and characters, and read only for the same tenant.
"""

from __future__ import annotations

from collections import OrderedDict

MAX_PLACES = 32
MAX_TENANTS = 10_000
MAX_TEXTS = 4096
MAX_TEXT_CHARS = 16_000_000


class LearnedPlaces:
    """Each tenant's learnt patterns, in the order learnt (the matcher tries them first)."""

    def __init__(self, max_places: int = MAX_PLACES, max_tenants: int = MAX_TENANTS) -> None:
        self._places: OrderedDict[str, tuple[str, ...]] = OrderedDict()
        self._max_places = max_places
        self._max_tenants = max_tenants

    def patterns(self, tenant: str) -> tuple[str, ...]:
        return self._places.get(tenant, ())

    def add(self, tenant: str, pattern: str) -> bool:
        """True when the pattern is new for the tenant."""
        known = self._places.pop(tenant, ())
        if pattern in known:
            self._places[tenant] = known
            return False
        self._places[tenant] = (*known, pattern)[-self._max_places :]
        while len(self._places) > self._max_tenants:
            self._places.popitem(last=False)
        return True


class HeadTexts:
    """The text of system blocks by (tenant, block digest): the previous call's version of a
    block that changed, for the learner to compare."""

    def __init__(self, max_entries: int = MAX_TEXTS, max_chars: int = MAX_TEXT_CHARS) -> None:
        self._texts: OrderedDict[tuple[str, bytes], str] = OrderedDict()
        self._chars = 0
        self._max_entries = max_entries
        self._max_chars = max_chars

    def get(self, tenant: str, digest: bytes) -> str | None:
        return self._texts.get((tenant, digest))

    def put(self, tenant: str, digest: bytes, text: str) -> None:
        key = (tenant, digest)
        if key in self._texts:
            self._texts.move_to_end(key)
            return
        self._texts[key] = text
        self._chars += len(text)
        while self._texts and (
            len(self._texts) > self._max_entries or self._chars > self._max_chars
        ):
            _, dropped = self._texts.popitem(last=False)
            self._chars -= len(dropped)
