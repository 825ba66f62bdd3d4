"""Block manager: exact block ids, ref counts, free-queue order, prefix hits, eviction, salts."""

from __future__ import annotations

import hashlib
import struct

import pytest

from selfhost.engine.block_hash import ROOT_PARENT, chain_hashes, hash_block
from selfhost.engine.block_manager import BlockManager, OutOfBlocks
from selfhost.engine.sequence import Sequence


def seq(request_id: str, tokens: list[int], salt: str = "") -> Sequence:
    return Sequence(request_id, list(tokens), cache_salt=salt)


def refs(manager: BlockManager) -> list[int]:
    return [block.ref_count for block in manager.blocks]


def compute(manager: BlockManager, s: Sequence, num_tokens: int) -> None:
    """What the engine does after a forward: mark tokens computed, publish full blocks."""
    s.num_computed_tokens = num_tokens
    manager.commit(s)


def test_chain_hash_byte_layout_is_the_documented_one() -> None:
    salt = "tenant-a"
    first = hashlib.sha256(
        bytes(32) + struct.pack("<I", 8) + b"tenant-a" + struct.pack("<4I", 1, 2, 3, 4)
    ).digest()
    second = hashlib.sha256(
        first + struct.pack("<I", 8) + b"tenant-a" + struct.pack("<4I", 5, 6, 7, 8)
    ).digest()
    assert chain_hashes([1, 2, 3, 4, 5, 6, 7, 8, 9], salt, block_size=4) == [first, second]
    assert hash_block(ROOT_PARENT, [1, 2, 3, 4], salt) == first
    assert chain_hashes([1, 2, 3], salt, block_size=4) == []
    assert chain_hashes(list(range(32)), "")[0] != chain_hashes(list(range(32)), "x")[0]
    assert len(chain_hashes(list(range(33)), "")) == 2  # default block size 16, full blocks only


def test_allocate_takes_blocks_from_the_head_of_the_free_queue() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(10)))
    assert manager.can_allocate(a, 10)
    manager.allocate(a, 10)
    assert a.block_table == [0, 1, 2]
    assert list(manager.free_queue) == [3, 4, 5, 6, 7]
    assert refs(manager) == [1, 1, 1, 0, 0, 0, 0, 0]
    manager.allocate(a, 13)  # grow by one block
    assert a.block_table == [0, 1, 2, 3]
    assert manager.num_free_blocks == 4


def test_commit_registers_only_full_computed_blocks() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(10)))
    manager.allocate(a, 10)
    compute(manager, a, 7)
    assert manager.hash_to_block == {chain_hashes(a.token_ids, "", 4)[0]: 0}
    compute(manager, a, 10)
    hashes = chain_hashes(a.token_ids, "", 4)
    assert manager.hash_to_block == {hashes[0]: 0, hashes[1]: 1}
    assert manager.blocks[1].token_ids == (4, 5, 6, 7)


def test_prefix_hit_shares_blocks_and_counts_refs() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(10)))
    manager.allocate(a, 10)
    compute(manager, a, 10)
    b = seq("b", [*range(9), 99, 98])
    hits = manager.match_prefix(b)
    assert hits == [0, 1]
    assert manager.num_needed(b, 11, hits) == 1  # one new block; the hits are live, not free
    manager.allocate(b, 11, hits)
    assert b.block_table == [0, 1, 3]
    assert b.num_computed_tokens == 8
    assert refs(manager) == [2, 2, 1, 1, 0, 0, 0, 0]


def test_free_order_tail_of_chain_first_and_unhashed_blocks_at_the_head() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(10)))
    manager.allocate(a, 10)
    compute(manager, a, 10)
    b = seq("b", [*range(9), 99, 98])
    manager.allocate(b, 11, manager.match_prefix(b))
    manager.free(a)
    assert list(manager.free_queue) == [2, 4, 5, 6, 7]  # a's unhashed tail block goes first
    assert refs(manager) == [1, 1, 0, 1, 0, 0, 0, 0]
    manager.free(b)
    assert list(manager.free_queue) == [3, 2, 4, 5, 6, 7, 1, 0]
    assert b.block_table == [] and b.num_computed_tokens == 0


def test_cached_free_block_is_revived_by_a_hit_and_evicted_lru_otherwise() -> None:
    manager = BlockManager(num_blocks=4, block_size=4)
    a = seq("a", list(range(9)))
    manager.allocate(a, 9)
    compute(manager, a, 9)
    manager.free(a)
    assert list(manager.free_queue) == [2, 3, 1, 0]
    again = seq("again", list(range(9)))
    hits = manager.match_prefix(again)
    assert hits == [0, 1]
    assert manager.num_needed(again, 9, hits) == 3  # 1 new + 2 revived from the free queue
    manager.allocate(again, 9, hits)
    assert again.block_table == [0, 1, 2]
    assert list(manager.free_queue) == [3]
    manager.free(again)
    assert list(manager.free_queue) == [2, 3, 1, 0]
    other = seq("other", list(range(100, 113)))
    manager.allocate(other, 13)  # needs 4 blocks: evicts block 1 (chain tail) then block 0
    assert other.block_table == [2, 3, 1, 0]
    assert manager.hash_to_block == {}
    assert manager.match_prefix(seq("late", list(range(9)))) == []


def test_hit_leaves_one_token_to_compute() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(8)))
    manager.allocate(a, 8)
    compute(manager, a, 8)
    assert manager.match_prefix(seq("same", list(range(8)))) == [0]
    assert manager.match_prefix(seq("longer", list(range(9)))) == [0, 1]


def test_salts_never_share_blocks() -> None:
    manager = BlockManager(num_blocks=8, block_size=4)
    a = seq("a", list(range(9)), salt="tenant-a")
    manager.allocate(a, 9)
    compute(manager, a, 9)
    assert manager.match_prefix(seq("b", list(range(9)), salt="tenant-b")) == []
    assert manager.match_prefix(seq("a2", list(range(9)), salt="tenant-a")) == [0, 1]


def test_allocate_beyond_capacity_raises() -> None:
    manager = BlockManager(num_blocks=2, block_size=4)
    a = seq("a", list(range(9)))
    assert not manager.can_allocate(a, 9)
    with pytest.raises(OutOfBlocks):
        manager.allocate(a, 9)
