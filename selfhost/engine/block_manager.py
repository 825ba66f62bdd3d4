"""KV block pool with prefix caching: ref counts, chained-hash lookup, LRU free queue.

Torch-free bookkeeping only; the KV tensor itself lives in the model runner.
Free queue order: the head is reused (and its cached hash evicted) first.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from selfhost.engine.sequence import Sequence


class OutOfBlocks(RuntimeError):
    """allocate() was called without a successful can_allocate()."""


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None
    token_ids: tuple[int, ...] = ()


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int = 16) -> None:
        self.block_size = block_size
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.hash_to_block: dict[bytes, int] = {}
        self.free_queue: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by live sequences (cached-but-free blocks count as free)."""
        return 1.0 - self.num_free_blocks / max(1, self.num_blocks)

    def num_blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Longest run of cached full blocks for `seq`, leaving at least one token to compute."""
        max_blocks = (seq.num_tokens - 1) // self.block_size
        hits: list[int] = []
        for index, block_hash in enumerate(seq.block_hashes(self.block_size)[:max_blocks]):
            block_id = self.hash_to_block.get(block_hash)
            if block_id is None:
                break
            start = index * self.block_size
            if self.blocks[block_id].token_ids != tuple(
                seq.token_ids[start : start + self.block_size]
            ):
                break
            hits.append(block_id)
        return hits

    def num_needed(self, seq: Sequence, num_tokens: int, cached: list[int] | None = None) -> int:
        """Free blocks consumed to hold `num_tokens` for `seq`, counting revived cached blocks."""
        cached = cached or []
        new = self.num_blocks_for(num_tokens) - len(seq.block_table) - len(cached)
        revived = sum(1 for block_id in cached if self.blocks[block_id].ref_count == 0)
        return max(0, new) + revived

    def can_allocate(
        self, seq: Sequence, num_tokens: int, cached: list[int] | None = None, reserve: int = 0
    ) -> bool:
        return self.num_needed(seq, num_tokens, cached) + reserve <= self.num_free_blocks

    def allocate(self, seq: Sequence, num_tokens: int, cached: list[int] | None = None) -> None:
        """Give `seq` the cached blocks `cached` (a prefix hit) and new blocks up to `num_tokens`."""
        cached = cached or []
        if not self.can_allocate(seq, num_tokens, cached):
            raise OutOfBlocks(f"{seq.request_id}: {num_tokens} tokens")
        for block_id in cached:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_queue[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
        if cached:
            seq.num_computed_tokens = len(seq.block_table) * self.block_size
            seq.num_committed_blocks = len(seq.block_table)
        while len(seq.block_table) < self.num_blocks_for(num_tokens):
            seq.block_table.append(self._take_free_block())

    def _take_free_block(self) -> int:
        block_id, _ = self.free_queue.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:
            # Evict: the least recently freed cached block is reused for new content.
            del self.hash_to_block[block.block_hash]
            block.block_hash = None
            block.token_ids = ()
        block.ref_count = 1
        return block_id

    def commit(self, seq: Sequence) -> None:
        """Register the hashes of `seq`'s newly computed full blocks so later requests can hit them."""
        num_full = seq.num_computed_tokens // self.block_size
        if num_full <= seq.num_committed_blocks:
            return
        hashes = seq.block_hashes(self.block_size)
        for index in range(seq.num_committed_blocks, num_full):
            block_hash = hashes[index]
            if block_hash in self.hash_to_block:
                continue  # the same content was computed concurrently by another sequence
            block = self.blocks[seq.block_table[index]]
            start = index * self.block_size
            block.block_hash = block_hash
            block.token_ids = tuple(seq.token_ids[start : start + self.block_size])
            self.hash_to_block[block_hash] = block.block_id
        seq.num_committed_blocks = num_full

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s references, tail block first, so chain tails are evicted before heads."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_queue[block_id] = None
                if block.block_hash is None:
                    self.free_queue.move_to_end(block_id, last=False)
        seq.block_table = []
        seq.num_committed_blocks = 0
        seq.num_computed_tokens = 0
