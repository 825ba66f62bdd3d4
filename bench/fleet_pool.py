"""The true block cache of one simulated replica (`bench/fleet_sim/`): content-addressed
16-token blocks, reference-counted while a request runs, an LRU of the unreferenced ones,
tails evicted first."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

__all__ = ["Pool"]


class Pool:
    """The true cache of one replica: referenced blocks plus an LRU of unreferenced ones."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.ref: dict[bytes, int] = {}
        self.lru: OrderedDict[bytes, None] = OrderedDict()

    def match(self, hashes: Sequence[Hashable]) -> int:
        n = 0
        for h in hashes:
            if h not in self.ref and h not in self.lru:
                break
            n += 1
        return n

    def new_blocks(self, blocks: Sequence[bytes]) -> int:
        return sum(1 for h in blocks if h not in self.ref and h not in self.lru)

    def can_hold(self, blocks: Sequence[bytes]) -> bool:
        pinned = len(self.ref) + sum(1 for h in blocks if h in self.lru)
        return pinned + self.new_blocks(blocks) <= self.capacity

    def acquire(self, blocks: Sequence[bytes]) -> None:
        for h in blocks:
            if h in self.ref:
                self.ref[h] += 1
                continue
            self.lru.pop(h, None)
            self.ref[h] = 1
        while len(self.ref) + len(self.lru) > self.capacity and self.lru:
            self.lru.popitem(last=False)

    def release(self, blocks: Sequence[bytes]) -> None:
        for h in reversed(blocks):  # tail first, so it is evicted first
            left = self.ref[h] - 1
            if left:
                self.ref[h] = left
            else:
                del self.ref[h]
                self.lru[h] = None
