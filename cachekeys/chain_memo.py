"""Prefix block hashes of a call, resumed from the calls before it (a bounded memo, no I/O).

An agent re-sends its whole history on every call; hashing it again costs ~one SHA-256 per 16
tokens. The memo keeps, per prompt-block boundary, the hashes that block added; a call walks its
blocks until the first unseen one and hashes only from there. Same bytes as `keys.prefix_hashes`
(tested). Holds digests and token ids of partial blocks (< 16 ids per boundary), never text.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cachekeys.blockhash import BLOCK_SIZE, ROOT_PARENT
from cachekeys.layout import PromptLayout

ChainState = tuple[bytes, int, tuple[int, ...]]  # (memo key, hashes so far, pending ids)
MAX_SEGMENT_HASHES = 65_536  # one block's: 1M tokens (~4 MB of text); a larger one is not kept


@dataclass(frozen=True, slots=True)
class ChainSegment:
    """What one prompt block added to the chain, and the ids left over for the next block."""

    hashes: tuple[bytes, ...]
    pending: tuple[int, ...]


def extend_chain(
    parent: bytes,
    first_block: int,
    pending: Sequence[int],
    ids: Sequence[int],
    salt: str,
    public_tokens: int,
    block_size: int = BLOCK_SIZE,
) -> ChainSegment:
    """Hash the full blocks of `pending + ids`, chained from `parent`; block number j (from 0 at
    the prompt's start) is unsalted iff it ends inside the first `public_tokens` tokens."""
    run = [*pending, *ids]
    num_blocks = len(run) // block_size
    salted = _salt_bytes(salt)
    public = PUBLIC_SALT
    packed = struct.pack(f"<{num_blocks * block_size}I", *run[: num_blocks * block_size])
    width = 4 * block_size
    hashes: list[bytes] = []
    for n in range(num_blocks):
        j = first_block + n
        prefix = public if (j + 1) * block_size <= public_tokens else salted
        parent = hashlib.sha256(parent + prefix + packed[n * width : (n + 1) * width]).digest()
        hashes.append(parent)
    return ChainSegment(tuple(hashes), tuple(run[num_blocks * block_size :]))


def _salt_bytes(salt: str) -> bytes:
    raw = salt.encode("utf-8")
    return len(raw).to_bytes(4, "little") + raw


PUBLIC_SALT = _salt_bytes("")  # what a public block is hashed with (no salt)


class PrefixHashMemo:
    """`prefix_hashes` with a bounded LRU of per-block segments, keyed by a running digest of
    (tokenizer, salt, public tokens, block digests so far): a key names the whole prefix.
    A pure memo (a lost segment costs rehashing): bounded by hashes held, not per tenant."""

    def __init__(self, max_hashes: int = 1_000_000, block_size: int = BLOCK_SIZE) -> None:
        self._segments: OrderedDict[bytes, ChainSegment] = OrderedDict()
        self._num_hashes = 0
        self._max_hashes = max_hashes
        self._block_size = block_size

    def prefix_hashes(
        self,
        layout: PromptLayout,
        block_token_ids: Sequence[Sequence[int]],
        salt: str,
        tokenizer: str,
    ) -> tuple[bytes, ...]:
        """`keys.prefix_hashes(layout, block_token_ids, salt)`; `tokenizer` names what made the
        ids (the model name will do), since equal text gives other ids under another one."""
        return self.walk(layout, block_token_ids, salt, tokenizer)[0]

    def walk(
        self,
        layout: PromptLayout,
        block_token_ids: Sequence[Sequence[int]],
        salt: str,
        tokenizer: str,
        resume: tuple[tuple[bytes, ...], Sequence[ChainState]] | None = None,
    ) -> tuple[tuple[bytes, ...], tuple[ChainState, ...]]:
        """`prefix_hashes` and the chain's state after each stable block. `resume` is an earlier
        walk's (hashes, states) for a prompt whose first `len(states)` blocks are this one's
        (same digests, tokenizer, salt and public tokens: the caller checks): those blocks are
        not walked again. The same hashes either way (tested)."""
        public_tokens = layout.public_tokens()
        stop = layout.last_stable() + 1
        states: list[ChainState]
        if resume and resume[1] and len(resume[1]) <= stop:
            states = list(resume[1])
            key, count, pending = states[-1]
            hashes = list(resume[0][:count])
        else:
            root = f"{tokenizer}\0{salt}\0{public_tokens}\0{self._block_size}".encode()
            key = hashlib.blake2b(root, digest_size=16).digest()
            hashes, pending, states = [], (), []
        for i in range(len(states), stop):
            key = hashlib.blake2b(key + layout.blocks[i].digest, digest_size=16).digest()
            segment = self._segments.get(key)
            if segment is None:
                parent = hashes[-1] if hashes else ROOT_PARENT
                segment = extend_chain(
                    parent,
                    len(hashes),
                    pending,
                    block_token_ids[i],
                    salt,
                    public_tokens,
                    self._block_size,
                )
                self._remember(key, segment)
            else:
                self._segments.move_to_end(key)
            hashes.extend(segment.hashes)
            pending = segment.pending
            states.append((key, len(hashes), pending))
        return tuple(hashes), tuple(states)

    def _remember(self, key: bytes, segment: ChainSegment) -> None:
        if len(segment.hashes) > MAX_SEGMENT_HASHES:
            return  # a huge block is hashed again if it comes back, never kept
        self._segments[key] = segment
        self._num_hashes += len(segment.hashes) + 1  # +1: an entry is never free
        while self._segments and self._num_hashes > self._max_hashes:
            _, evicted = self._segments.popitem(last=False)
            self._num_hashes -= len(evicted.hashes) + 1

    @property
    def num_segments(self) -> int:
        return len(self._segments)
