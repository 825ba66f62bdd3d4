"""Tenant-scoped keys of a prompt: prefix block hashes, the OpenAI `prompt_cache_key`, the session root.

Pure. Private content is always keyed with the tenant's salt; only the leading run of blocks an
admin declared public is keyed without it, so two tenants share a key only for public text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from cachekeys.blockhash import BLOCK_SIZE, scoped_chain_hashes
from cachekeys.layout import PromptLayout

KEY_PREFIX = "lt-"


def _keyed(salt: str, parts: Iterable[bytes]) -> str:
    digest = hashlib.sha256()
    salt_bytes = salt.encode("utf-8")
    digest.update(len(salt_bytes).to_bytes(4, "little") + salt_bytes)
    for part in parts:
        digest.update(part)
    return KEY_PREFIX + digest.hexdigest()[:32]


def _head_indices(layout: PromptLayout) -> list[int]:
    """Stable tools and system blocks: the part every call of an agent shares."""
    return [i for i, b in enumerate(layout.blocks) if b.level != "messages" and not b.is_volatile]


def prompt_cache_key(layout: PromptLayout, salt: str, client_key: str | None = None) -> str:
    """OpenAI `prompt_cache_key`: the client's own key scoped to the tenant, else the key of the
    stable tools+system prefix (unsalted only when all of it is declared public)."""
    if client_key:
        return _keyed(salt, [b"client\0", client_key.encode("utf-8")])
    head = _head_indices(layout)
    is_public = bool(head) and all(layout.blocks[i].is_public for i in head)
    return _keyed(
        "" if is_public else salt, [b"prefix\0", *(layout.blocks[i].digest for i in head)]
    )


def head_tokens(layout: PromptLayout) -> int:
    """Tokens of the stable tools + system head."""
    tokens = layout.tokens
    return sum([tokens[i] for i in _head_indices(layout)])


def head_write_key(layout: PromptLayout, salt: str) -> str:
    """The tenant-scoped key of the stable tools + system head: calls with equal keys, sent to
    one upstream, write the same provider entry (the fan-out gate's key)."""
    return _keyed(salt, [b"head\0", *(layout.blocks[i].digest for i in _head_indices(layout))])


def session_root(layout: PromptLayout, salt: str, masked: Sequence[bytes] | None = None) -> str:
    """The tenant-scoped key of the conversation's root: tools + system + first message.

    Sub-agents that fork a parent's root share it, so they share the parent's affinity.
    `masked`: per block, a digest with volatile values masked (`cachekeys.volatile_probe`), so
    a timestamp in the system prompt does not make every call a new session.
    """
    first_message = next((b.locator[1] for b in layout.blocks if b.level == "messages"), None)
    digests = [b.digest for b in layout.blocks] if masked is None else masked
    parts = [
        digest
        for b, digest in zip(layout.blocks, digests, strict=True)
        if not b.is_volatile and (b.level != "messages" or b.locator[1] == first_message)
    ]
    return _keyed(salt, [b"root\0", *parts])


def prefix_hashes(
    layout: PromptLayout,
    block_token_ids: Sequence[Sequence[int]],
    salt: str,
    block_size: int = BLOCK_SIZE,
) -> tuple[bytes, ...]:
    """Chained hashes over the stable prefix's tokens (`block_token_ids[i]` are block i's ids)."""
    ids: list[int] = []
    for i in range(layout.last_stable() + 1):
        ids.extend(block_token_ids[i])
    return scoped_chain_hashes(ids, layout.public_tokens(), salt, block_size)
