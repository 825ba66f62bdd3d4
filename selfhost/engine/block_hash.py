"""Chained prefix-block hashes: the one scheme the engine and the gateway's cachekeys share.

Pure and torch-free. The byte layout is documented in docs/engine.md and must not change silently.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

ROOT_PARENT = bytes(32)
DEFAULT_BLOCK_SIZE = 16


def hash_block(parent: bytes, token_ids: Sequence[int], salt: str) -> bytes:
    """SHA-256(parent || len(salt_utf8) as u32 LE || salt_utf8 || token ids as u32 LE)."""
    salt_bytes = salt.encode("utf-8")
    digest = hashlib.sha256(parent)
    digest.update(struct.pack("<I", len(salt_bytes)))
    digest.update(salt_bytes)
    digest.update(struct.pack(f"<{len(token_ids)}I", *token_ids))
    return digest.digest()


def chain_hashes(
    token_ids: Sequence[int],
    salt: str,
    block_size: int = DEFAULT_BLOCK_SIZE,
    public_tokens: int = 0,
) -> list[bytes]:
    """Hashes of every full block of `token_ids`, each chained to its parent's hash. Blocks
    that end inside the first `public_tokens` hash with the empty salt (a public head); a block
    that straddles that end keeps `salt`."""
    hashes: list[bytes] = []
    parent = ROOT_PARENT
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        block_salt = "" if start + block_size <= public_tokens else salt
        parent = hash_block(parent, token_ids[start : start + block_size], block_salt)
        hashes.append(parent)
    return hashes
