"""The approximate prefix index: per replica, an LRU set of chained block hashes, fed by the
router's own dispatches (and answers), bounded by the replica's KV capacity in blocks, each
stamped with the second it was last touched (how much of a replica's cache is in live use).

It ages like the engine's block pool: the blocks of calls in flight are pinned (held outside
the LRU, never evicted, as a paged-KV engine holds a running request's blocks) together with
the answer blocks each call reserves, and only the rest is an LRU, of the capacity left over.

In-memory data structure only; the fleet owns one instance and injects nothing global.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Hashable, Sequence
from itertools import repeat

# blocks are stamped with the whole second of their last touch (the recent-use granularity)
_STAMP_S = 1.0


class PrefixIndex:
    """Which block hashes each replica probably holds. A match is the longest leading run of a
    request's chained hashes present on the replica (a gap ends it, as in the engine)."""

    def __init__(self, min_capacity_blocks: int = 64) -> None:
        # unpinned blocks, oldest first: hash -> stamp of last touch
        self._blocks: dict[str, OrderedDict[Hashable, int]] = {}
        # blocks of calls in flight: hash -> stamp of last touch; a block more than one call
        # holds also has an entry in _shared: hash -> holders beyond the first (rare: forks and
        # concurrent calls of one session), so the common pin and unpin run as C-level bulk ops
        self._pinned: dict[str, dict[Hashable, int]] = {}
        self._shared: dict[str, dict[Hashable, int]] = {}
        self._reserved: dict[str, int] = {}  # answer blocks reserved by calls in flight
        self._stamps: dict[str, Counter[int]] = {}  # stamp -> blocks last touched then
        self._capacity: dict[str, int] = {}
        self._nominal: dict[str, int] = {}
        self._min_capacity = min_capacity_blocks

    def add_replica(self, replica: str, capacity_blocks: int) -> None:
        self._blocks.setdefault(replica, OrderedDict())
        self._pinned.setdefault(replica, {})
        self._shared.setdefault(replica, {})
        self._reserved.setdefault(replica, 0)
        self._stamps.setdefault(replica, Counter())
        self._capacity[replica] = capacity_blocks
        self._nominal[replica] = capacity_blocks

    def remove_replica(self, replica: str) -> None:
        self._blocks.pop(replica, None)
        self._pinned.pop(replica, None)
        self._shared.pop(replica, None)
        self._reserved.pop(replica, None)
        self._stamps.pop(replica, None)
        self._capacity.pop(replica, None)
        self._nominal.pop(replica, None)

    def clear(self, replica: str) -> None:
        """The replica lost its cache (restart, failed health check). Calls still in flight
        there unpin nothing (their blocks are gone with the rest)."""
        if replica in self._blocks:
            self._blocks[replica].clear()
            self._pinned[replica].clear()
            self._shared[replica].clear()
            self._reserved[replica] = 0
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
        """Distinct blocks held, pinned or not (reserved answer blocks are not counted)."""
        return len(self._blocks.get(replica, ())) + len(self._pinned.get(replica, ()))

    def pinned(self, replica: str) -> int:
        """Blocks held for calls in flight: their prompts' distinct blocks and reserved answers."""
        return len(self._pinned.get(replica, ())) + self._reserved.get(replica, 0)

    def matched_blocks(self, replica: str, hashes: Sequence[Hashable]) -> int:
        blocks = self._blocks.get(replica)
        if blocks is None:
            return 0
        pinned = self._pinned[replica]
        count = 0
        for h in hashes:
            if h not in blocks and h not in pinned:
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
        evicting the LRU. A block pinned by a call in flight stays pinned, re-stamped."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        stamps, stamp = self._stamps[replica], int(now // _STAMP_S)
        pinned = self._pinned[replica]
        limit = self._capacity[replica]
        if len(hashes) >= limit and not pinned and not self._reserved[replica]:
            # the prompt alone fills the replica: only its head survives
            self._blocks[replica] = OrderedDict.fromkeys(reversed(hashes[:limit]), stamp)
            stamps.clear()
            stamps[stamp] = len(self._blocks[replica])
            return
        # newest-first, so the shared prefix ends most recent and the tail is evicted first
        for h in reversed(hashes):
            held = pinned.get(h)
            if held is not None:
                self._restamp(stamps, held, stamp)
                pinned[h] = stamp
                continue
            old = blocks.get(h)
            if old is not None:
                blocks.move_to_end(h)
                self._restamp(stamps, old, None)
            blocks[h] = stamp
            stamps[stamp] += 1
        self._evict(replica, limit)

    def pin(
        self, replica: str, hashes: Sequence[Hashable], now: float, reserve_blocks: int = 0
    ) -> None:
        """A call was dispatched with prompt `hashes` and reserves `reserve_blocks` for its
        answer: its blocks are held outside the LRU until `unpin`, touched at `now`, and the
        LRU shrinks to what is left (the engine pins a running request's blocks the same way;
        a call still queued in the engine is counted as if admitted)."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        stamps, stamp = self._stamps[replica], int(now // _STAMP_S)
        pinned = self._pinned[replica]
        if pinned.keys().isdisjoint(hashes) and len(set(hashes)) == len(hashes):
            # the common case (no other call in flight shares a block): bulk ops, in C
            left: Counter[int | None] = Counter(map(blocks.pop, hashes, repeat(None)))
            pinned.update(dict.fromkeys(hashes, stamp))
        else:
            shared = self._shared[replica]
            left = Counter()
            for h in hashes:
                held = pinned.get(h)
                if held is not None:
                    shared[h] = shared.get(h, 0) + 1
                    left[held] += 1
                else:
                    left[blocks.pop(h, None)] += 1
                pinned[h] = stamp
        # every block is now stamped `stamp`; the stamps it left (None: it was new) lose one each
        added = len(hashes) - left.pop(stamp, 0)
        if added:
            stamps[stamp] += added
        for old, n in left.items():
            if old is None:
                continue
            remaining = stamps[old] - n
            if remaining:
                stamps[old] = remaining
            else:
                del stamps[old]
        self._reserved[replica] += max(reserve_blocks, 0)
        self._evict(replica, self._capacity[replica])

    def unpin(self, replica: str, hashes: Sequence[Hashable], reserve_blocks: int = 0) -> None:
        """The call pinned with `hashes` and `reserve_blocks` ended (completion, error or
        disconnect): blocks no other call holds return to the LRU as its most recent entries,
        tail first so the head is evicted last; their stamps are kept."""
        blocks = self._blocks.get(replica)
        if blocks is None:
            return
        pinned, shared = self._pinned[replica], self._shared[replica]
        tail_first = hashes[::-1]
        if not shared and all(map(pinned.__contains__, tail_first)):
            # the common case (every block held by this call alone): bulk ops, in C
            blocks.update(zip(tail_first, map(pinned.pop, tail_first), strict=True))
        else:
            for h in tail_first:
                if h not in pinned:  # cleared while in flight
                    continue
                others = shared.get(h)
                if others is None:
                    blocks[h] = pinned.pop(h)
                elif others == 1:
                    del shared[h]
                else:
                    shared[h] = others - 1
        self._reserved[replica] = max(self._reserved[replica] - max(reserve_blocks, 0), 0)

    @staticmethod
    def _restamp(stamps: Counter[int], old: int, new: int | None) -> None:
        stamps[old] -= 1
        if not stamps[old]:
            del stamps[old]
        if new is not None:
            stamps[new] += 1

    def _evict(self, replica: str, limit: int) -> None:
        """Drop the oldest unpinned blocks until pinned, reserved and LRU fit `limit`."""
        blocks, stamps = self._blocks[replica], self._stamps[replica]
        limit -= len(self._pinned[replica]) + self._reserved[replica]
        while blocks and len(blocks) > limit:
            _, old = blocks.popitem(last=False)
            self._restamp(stamps, old, None)

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
