"""The per-replica prefix index: LRU order, and a prompt larger than the replica."""

from __future__ import annotations

from adapters.routing_index import PrefixIndex


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
