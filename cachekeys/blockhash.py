"""Chained prefix block hashes and tenant salts: the one scheme the router and the engine share.

Pure functions over token ids; must stay byte-compatible with `selfhost.engine.block_hash` (tested),
but never imports it (cachekeys depends on adapters.types only).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence

BLOCK_SIZE = 16
ROOT_PARENT = bytes(32)


def tenant_salt(server_secret: bytes, tenant_id: str) -> str:
    """The per-tenant salt: hex HMAC-SHA256(server_secret, tenant_id), first 32 hex digits."""
    return hmac.new(server_secret, tenant_id.encode("utf-8"), hashlib.sha256).hexdigest()[:32]


def block_hash(parent: bytes, salt: str, token_ids: Sequence[int]) -> bytes:
    """SHA-256 over parent || len(salt) as u32 LE || salt utf-8 || token ids as u32 LE."""
    salt_bytes = salt.encode("utf-8")
    digest = hashlib.sha256(parent)
    digest.update(struct.pack("<I", len(salt_bytes)))
    digest.update(salt_bytes)
    digest.update(struct.pack(f"<{len(token_ids)}I", *token_ids))
    return digest.digest()


def chain_hashes(
    token_ids: Sequence[int],
    salt: str = "",
    block_size: int = BLOCK_SIZE,
    parent: bytes = ROOT_PARENT,
) -> tuple[bytes, ...]:
    """Hashes of the full blocks of `token_ids`, each chained to the one before it.

    Same bytes as `block_hash` per block; the ids are packed once (a 34k-token prompt is 2,000+
    blocks, and this runs on every call)."""
    salt_bytes = salt.encode("utf-8")
    salted = struct.pack("<I", len(salt_bytes)) + salt_bytes
    num_blocks = len(token_ids) // block_size
    packed = struct.pack(f"<{num_blocks * block_size}I", *token_ids[: num_blocks * block_size])
    width = 4 * block_size
    hashes: list[bytes] = []
    for offset in range(0, num_blocks * width, width):
        parent = hashlib.sha256(parent + salted + packed[offset : offset + width]).digest()
        hashes.append(parent)
    return tuple(hashes)


def scoped_chain_hashes(
    token_ids: Sequence[int], public_tokens: int, salt: str, block_size: int = BLOCK_SIZE
) -> tuple[bytes, ...]:
    """Chain hashes where full blocks inside the first `public_tokens` hash without the salt.

    A block that straddles the public/private boundary is private (salted): sharing is only
    ever granted to bytes an admin declared public.
    """
    num_public_blocks = min(public_tokens, len(token_ids)) // block_size
    split = num_public_blocks * block_size
    public = chain_hashes(token_ids[:split], "", block_size)
    parent = public[-1] if public else ROOT_PARENT
    return public + chain_hashes(token_ids[split:], salt, block_size, parent)
