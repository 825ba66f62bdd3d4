"""The prefix index ages like the engine's block pool: the blocks of calls in flight are
pinned outside the LRU (with their reserved answer blocks), and the LRU holds what is left."""

from __future__ import annotations

import random

from routing.prefix_index import PrefixIndex


def _index(capacity: int) -> PrefixIndex:
    index = PrefixIndex(min_capacity_blocks=1)
    index.add_replica("r0", capacity)
    return index


def test_a_call_in_flight_keeps_its_blocks_and_shrinks_the_lru() -> None:
    index = _index(10)
    index.insert("r0", ["old1", "old2", "old3", "old4"], now=0.0)
    index.pin("r0", ["a", "b", "c"], now=1.0, reserve_blocks=2)  # 3 + 2 answer blocks held
    assert index.pinned("r0") == 5
    index.insert("r0", ["x", "y", "z"], now=2.0)  # 5 held + 7 for an LRU of 5: 2 go
    assert index.size("r0") == 8
    old = [index.matched_blocks("r0", [f"old{i}"]) for i in range(1, 5)]
    assert old == [1, 1, 0, 0]  # the tail was the least recent (inserted newest-first)
    index.insert("r0", [f"n{i}" for i in range(20)], now=3.0)  # floods the LRU
    assert index.matched_blocks("r0", ["a", "b", "c"]) == 3  # pinned: never evicted
    assert index.size("r0") == 3 + 5  # the LRU got the 10 - 5 left over


def test_unpinned_blocks_return_as_most_recent_head_last() -> None:
    index = _index(6)
    index.pin("r0", ["a", "b", "c"], now=0.0, reserve_blocks=1)
    index.insert("r0", ["x", "y"], now=1.0)
    index.unpin("r0", ["a", "b", "c"], reserve_blocks=1)
    assert index.pinned("r0") == 0
    index.insert("r0", ["p", "q"], now=2.0)  # 7 for 6: the LRU's oldest, "y", goes
    assert index.matched_blocks("r0", ["x", "y"]) == 1
    index.insert("r0", ["s", "t", "u"], now=3.0)  # then "x", then the released tail "c", "b"
    assert index.matched_blocks("r0", ["a", "b", "c"]) == 1


def test_a_shared_prefix_stays_pinned_until_its_last_call_ends() -> None:
    index = _index(5)
    index.pin("r0", ["sys", "s1"], now=0.0)
    index.pin("r0", ["sys", "s2"], now=0.0)
    index.unpin("r0", ["sys", "s1"])
    assert index.pinned("r0") == 2  # "sys" (still held by the second call) and "s2"
    index.insert("r0", ["f1", "f2", "f3", "f4"], now=1.0)
    assert index.matched_blocks("r0", ["sys", "s2"]) == 2
    assert index.matched_blocks("r0", ["sys", "s1"]) == 1  # "s1" was free, so evicted


def test_pins_outlive_a_clear_harmlessly() -> None:
    index = _index(4)
    index.pin("r0", ["a", "b"], now=0.0, reserve_blocks=2)
    index.clear("r0")  # the replica lost its cache while the call ran
    assert (index.size("r0"), index.pinned("r0")) == (0, 0)
    index.unpin("r0", ["a", "b"], reserve_blocks=2)  # the call ends: nothing to release
    assert (index.size("r0"), index.pinned("r0")) == (0, 0)
    index.insert("r0", ["c", "d", "e", "f"], now=1.0)
    assert index.size("r0") == 4  # the whole capacity is the LRU's again
    index.unpin("missing", ["a"])
    index.pin("missing", ["a"], now=0.0)
    assert index.pinned("missing") == 0


def test_recent_blocks_count_pinned_blocks_once() -> None:
    index = _index(10)
    index.pin("r0", ["a", "b"], now=100.0)
    index.insert("r0", ["a", "b", "c"], now=105.0)  # re-touched while pinned
    assert index.recent_blocks("r0", now=106.0, window_s=3.0) == 3
    index.unpin("r0", ["a", "b"])
    assert index.recent_blocks("r0", now=106.0, window_s=3.0) == 3  # stamps kept
    assert index.recent_blocks("r0", now=120.0, window_s=3.0) == 0


class _Pool:
    """A reference engine pool, block by block: referenced blocks plus an LRU of free ones."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.ref, self.lru, self.reserved = capacity, {}, [], 0

    def _fit(self) -> None:
        while self.lru and len(self.lru) + len(self.ref) + self.reserved > self.capacity:
            self.lru.pop(0)

    def pin(self, hashes: list[str], reserve: int) -> None:
        for h in hashes:
            if h in self.lru:
                self.lru.remove(h)
            self.ref[h] = self.ref.get(h, 0) + 1
        self.reserved += reserve
        self._fit()

    def unpin(self, hashes: list[str], reserve: int) -> None:
        for h in reversed(hashes):
            self.ref[h] -= 1
            if not self.ref[h]:
                del self.ref[h]
                self.lru.append(h)
        self.reserved -= reserve

    def insert(self, hashes: list[str]) -> None:
        for h in reversed(hashes):
            if h in self.ref:
                continue
            if h in self.lru:
                self.lru.remove(h)
            self.lru.append(h)
        self._fit()


def test_the_index_matches_a_block_by_block_engine_pool() -> None:
    rng = random.Random(11)
    index, pool = _index(40), _Pool(40)
    inflight: list[tuple[list[str], int]] = []
    for step in range(600):
        op = rng.random()
        hashes = [f"h{rng.randrange(90)}" for _ in range(rng.randrange(1, 15))]
        hashes = list(dict.fromkeys(hashes))  # a prompt's chained hashes are distinct
        if op < 0.4 and len(inflight) < 3:
            reserve = rng.randrange(0, 4)
            index.pin("r0", hashes, now=float(step), reserve_blocks=reserve)
            pool.pin(hashes, reserve)
            inflight.append((hashes, reserve))
        elif op < 0.7 and inflight:
            done, reserve = inflight.pop(rng.randrange(len(inflight)))
            index.unpin("r0", done, reserve_blocks=reserve)
            pool.unpin(done, reserve)
        else:
            index.insert("r0", hashes, now=float(step))
            pool.insert(hashes)
        held = {f"h{i}" for i in range(90) if index.matched_blocks("r0", [f"h{i}"])}
        assert held == set(pool.ref) | set(pool.lru)
        assert index.size("r0") == len(pool.ref) + len(pool.lru)
        assert index.pinned("r0") == len(pool.ref) + pool.reserved
