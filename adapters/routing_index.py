"""The approximate prefix index: per replica, an LRU set of chained block hashes, fed by the
router's own dispatches (and answers), bounded by the replica's KV capacity in blocks, each
stamped with the second it was last touched (how much of a replica's cache is in live use).

In-memory data structure only; the fleet owns one instance and injects nothing global.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence

# blocks are stamped with the whole second of their last touch (the recent-use granularity)
_STAMP_S = 1.0


class PrefixIndex:
    """Which block hashes each replica probably holds. A match is the longest leading run of a
    request's chained hashes present on the replica (a gap ends it, as in the engine)."""

    def __init__(self, min_capacity_blocks: int = 64) -> None:
        self._blocks: dict[str, OrderedDict[Hashable, int]] = {}  # hash -> stamp of last touch
        self._stamps: dict[str, Counter[int]] = {}  # stamp -> blocks last touched then
        self._capacity: dict[str, int] = {}
        self._nominal: dict[str, int] = {}
        self._min_capacity = min_capacity_blocks

    def add_replica(self, replica: str, capacity_blocks: int) -> None:
        self._blocks.setdefault(replica, OrderedDict())
        self._stamps.setdefault(replica, Counter())
        self._capacity[replica] = capacity_blocks
        self._nominal[replica] = capacity_blocks

    def remove_replica(self, replica: str) -> None:
        self._blocks.pop(replica, None)
        self._stamps.pop(replica, None)
        self._capacity.pop(replica, None)
        self._nominal.pop(replica, None)

    def clear(self, replica: str) -> None:
        """The replica lost its cache (restart, failed health check)."""
        if replica in self._blocks:
            self._blocks[replica].clear()
            self._stamps[replica].clear()

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
        self._evict(replica, capacity_blocks)

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

    def recent_blocks(self, replica: str, now: float, window_s: float) -> int:
        """Distinct blocks on `replica` touched (dispatched or answered) in the last `window_s`
        seconds: the part of its cache that live sessions use, at most its capacity."""
        stamps = self._stamps.get(replica)
        if not stamps:
            return 0
        newest, oldest = int(now // _STAMP_S), int((now - window_s) // _STAMP_S)
        if newest - oldest > len(stamps):
            return sum(n for t, n in stamps.items() if t >= oldest)
        return sum(stamps.get(t, 0) for t in range(oldest, newest + 1))

    def insert(self, replica: str, hashes: Sequence[Hashable], now: float = 0.0) -> None:
        """Record that `replica` now holds `hashes` (most recently used, touched at `now`),
        evicting the LRU."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        stamps, stamp = self._stamps[replica], int(now // _STAMP_S)
        limit = self._capacity[replica]
        if len(hashes) >= limit:  # the prompt alone fills the replica: only its head survives
            self._blocks[replica] = OrderedDict.fromkeys(reversed(hashes[:limit]), stamp)
            stamps.clear()
            stamps[stamp] = len(self._blocks[replica])
            return
        # newest-first, so the shared prefix ends most recent and the tail is evicted first
        for h in reversed(hashes):
            old = blocks.get(h)
            if old is not None:
                blocks.move_to_end(h)
                stamps[old] -= 1
                if not stamps[old]:
                    del stamps[old]
            blocks[h] = stamp
            stamps[stamp] += 1
        self._evict(replica, limit)

    def _evict(self, replica: str, limit: int) -> None:
        blocks, stamps = self._blocks[replica], self._stamps[replica]
        while len(blocks) > limit:
            _, old = blocks.popitem(last=False)
            stamps[old] -= 1
            if not stamps[old]:
                del stamps[old]

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
