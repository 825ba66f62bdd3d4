"""The per-replica prefix index: LRU order, and a prompt larger than the replica."""

from __future__ import annotations

import random

from routing.prefix_index import PrefixIndex


def _index(capacity: int) -> PrefixIndex:
    index = PrefixIndex(min_capacity_blocks=1)
    index.add_replica("r0", capacity)
    return index


def test_a_prompt_larger_than_the_replica_keeps_only_its_head() -> None:
    index = _index(4)
    index.insert("r0", ["a", "b", "c", "d", "e", "f"])
    assert index.size("r0") == 4
    assert index.matched_blocks("r0", ["a", "b", "c", "d", "e", "f"]) == 4
    index.insert("r0", ["x"])  # one new block evicts the least recent: the head's tail "d"
    assert index.matched_blocks("r0", ["a", "b", "c", "d"]) == 3
    assert index.matched_blocks("r0", ["x"]) == 1


def _reference_lru(capacity: int, inserts: list[list[str]]) -> list[str]:
    """Block-by-block LRU (newest last): what the index must hold, shortcut or not."""
    blocks: dict[str, None] = {}
    for hashes in inserts:
        for h in reversed(hashes):
            blocks.pop(h, None)
            blocks[h] = None
        while len(blocks) > capacity:
            del blocks[next(iter(blocks))]
    return list(blocks)


def test_the_shortcut_equals_block_by_block_insertion() -> None:
    inserts = [["a", "b"], ["p", "q", "r", "s", "t"], ["p", "x"]]
    index = _index(3)
    for hashes in inserts:
        index.insert("r0", hashes)
    held = _reference_lru(3, inserts)  # ['q', 'x', 'p'] oldest first
    assert held == ["q", "x", "p"]
    assert index.size("r0") == 3
    assert index.matched_blocks("r0", ["p", "q"]) == 2
    index.insert("r0", ["y"])  # evicts the reference's oldest, "q"
    assert index.matched_blocks("r0", ["p", "q"]) == 1


def test_an_engine_reported_size_replaces_the_configured_one() -> None:
    idx = PrefixIndex(min_capacity_blocks=1)
    idx.add_replica("r", 10)
    idx.insert("r", [f"b{i}".encode() for i in range(10)])
    idx.correct("r", predicted_blocks=10, reported_blocks=0)  # shrinks the estimate to 9
    assert (idx.capacity("r"), idx.nominal("r")) == (9, 10)
    idx.resize("r", 4)  # smaller: the oldest entries go, the correction restarts from the truth
    assert (idx.capacity("r"), idx.nominal("r"), idx.size("r")) == (4, 4, 4)
    assert idx.matched_blocks("r", [f"b{i}".encode() for i in range(10)]) == 4  # head kept
    idx.resize("r", 4)
    idx.resize("missing", 100)  # unknown replica: nothing to do
    assert idx.nominal("missing") == 0


def test_recent_blocks_count_what_was_touched_in_the_window() -> None:
    index = _index(10)
    index.insert("r0", ["a", "b", "c"], now=100.2)
    index.insert("r0", ["x", "y"], now=105.0)
    assert index.recent_blocks("r0", now=106.0, window_s=10.0) == 5
    assert index.recent_blocks("r0", now=112.0, window_s=10.0) == 2  # a, b, c are idle
    index.insert("r0", ["a"], now=111.5)  # touched again: counted once, at its new time
    assert index.recent_blocks("r0", now=112.0, window_s=10.0) == 3
    assert index.recent_blocks("r0", now=130.0, window_s=10.0) == 0
    assert index.recent_blocks("r0", now=130.0, window_s=1000.0) == 5  # held, just idle
    assert index.recent_blocks("missing", now=130.0, window_s=10.0) == 0


def test_evicted_and_cleared_blocks_leave_the_recent_count() -> None:
    index = _index(4)
    index.insert("r0", ["a", "b", "c"], now=1.0)
    index.insert("r0", ["d", "e"], now=2.0)  # 5 for 4 slots: the LRU block goes
    assert index.size("r0") == 4
    assert index.recent_blocks("r0", now=2.0, window_s=5.0) == 4
    index.insert("r0", ["p", "q", "r", "s", "t", "u"], now=3.0)  # fills the replica alone
    assert index.recent_blocks("r0", now=3.0, window_s=0.5) == 4
    index.resize("r0", 2)
    assert index.recent_blocks("r0", now=3.0, window_s=5.0) == 2
    index.clear("r0")
    assert index.recent_blocks("r0", now=3.0, window_s=5.0) == 0


def test_recent_blocks_match_a_brute_force_count() -> None:
    rng = random.Random(7)
    index = _index(50)
    touched: dict[str, float] = {}
    order: list[str] = []
    t = 0.0
    for _ in range(300):
        t += rng.random()
        hashes = [f"h{rng.randrange(120)}" for _ in range(rng.randrange(1, 12))]
        index.insert("r0", hashes, now=t)
        for h in reversed(hashes):  # the reference LRU: newest last
            if h in order:
                order.remove(h)
            order.append(h)
            touched[h] = t
        del order[: max(len(order) - 50, 0)]
        window = rng.choice([0.5, 3.0, 10.0])
        expect = sum(1 for h in order if int(touched[h]) >= int(t - window))
        assert index.recent_blocks("r0", now=t, window_s=window) == expect
