"""The approximate prefix index: per replica, an LRU set of chained block hashes, fed by the
router's own dispatches (and answers), bounded by the replica's KV capacity in blocks.

In-memory data structure only; the fleet owns one instance and injects nothing global.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class PrefixIndex:
    """Which block hashes each replica probably holds. A match is the longest leading run of a
    request's chained hashes present on the replica (a gap ends it, as in the engine)."""

    def __init__(self, min_capacity_blocks: int = 64) -> None:
        self._blocks: dict[str, OrderedDict[Hashable, None]] = {}
        self._capacity: dict[str, int] = {}
        self._nominal: dict[str, int] = {}
        self._min_capacity = min_capacity_blocks

    def add_replica(self, replica: str, capacity_blocks: int) -> None:
        self._blocks.setdefault(replica, OrderedDict())
        self._capacity[replica] = capacity_blocks
        self._nominal[replica] = capacity_blocks

    def remove_replica(self, replica: str) -> None:
        self._blocks.pop(replica, None)
        self._capacity.pop(replica, None)
        self._nominal.pop(replica, None)

    def clear(self, replica: str) -> None:
        """The replica lost its cache (restart, failed health check)."""
        if replica in self._blocks:
            self._blocks[replica].clear()

    def capacity(self, replica: str) -> int:
        return self._capacity.get(replica, 0)

    def nominal(self, replica: str) -> int:
        """The replica's KV size as configured or engine-reported (before any correction)."""
        return self._nominal.get(replica, 0)

    def resize(self, replica: str, capacity_blocks: int) -> None:
        """The engine reported its real KV size: adopt it, dropping the oldest entries if smaller."""
        blocks = self._blocks.get(replica)
        if blocks is None or capacity_blocks == self._nominal[replica]:
            return
        self._capacity[replica] = self._nominal[replica] = capacity_blocks
        while len(blocks) > capacity_blocks:
            blocks.popitem(last=False)

    def size(self, replica: str) -> int:
        return len(self._blocks.get(replica, ()))

    def matched_blocks(self, replica: str, hashes: Sequence[Hashable]) -> int:
        blocks = self._blocks.get(replica)
        if not blocks:
            return 0
        count = 0
        for h in hashes:
            if h not in blocks:
                break
            count += 1
        return count

    def insert(self, replica: str, hashes: Sequence[Hashable]) -> None:
        """Record that `replica` now holds `hashes` (most recently used), evicting the LRU."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        limit = self._capacity[replica]
        if len(hashes) >= limit:  # the prompt alone fills the replica: only its head survives
            self._blocks[replica] = OrderedDict.fromkeys(reversed(hashes[:limit]))
            return
        # newest-first, so the shared prefix ends most recent and the tail is evicted first
        for h in reversed(hashes):
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
        while len(blocks) > limit:
            blocks.popitem(last=False)

    def correct(self, replica: str, predicted_blocks: int, reported_blocks: int) -> None:
        """Fold an engine-reported hit into the capacity estimate: a clear shortfall means the
        engine evicts earlier than the index assumed, so shrink a little; a full hit regrows."""
        if replica not in self._capacity or predicted_blocks == 0:
            return
        nominal = self._nominal[replica]
        current = self._capacity[replica]
        step = max(1, nominal // 100)
        if reported_blocks < 0.9 * predicted_blocks:
            current = max(self._min_capacity, current - step)
        elif reported_blocks >= predicted_blocks:
            current = min(nominal, current + step)
        self._capacity[replica] = current
