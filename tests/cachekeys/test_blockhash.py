"""Block hashes: byte layout, chaining, tenant salt, public/private split, equality with the engine."""

from __future__ import annotations

import hashlib
import hmac
import struct

from cachekeys.blockhash import (
    ROOT_PARENT,
    block_hash,
    chain_hashes,
    scoped_chain_hashes,
    tenant_salt,
)


def test_block_hash_byte_layout() -> None:
    expected = hashlib.sha256(
        ROOT_PARENT + struct.pack("<I", 3) + b"abc" + struct.pack("<3I", 1, 2, 70000)
    ).digest()
    assert block_hash(ROOT_PARENT, "abc", [1, 2, 70000]) == expected


def test_chain_covers_full_blocks_only_and_chains_parents() -> None:
    ids = list(range(40))
    hashes = chain_hashes(ids, "s")
    assert len(hashes) == 2  # 40 tokens: two full blocks of 16, the last 8 are not hashed
    assert hashes[0] == block_hash(ROOT_PARENT, "s", ids[:16])
    assert hashes[1] == block_hash(hashes[0], "s", ids[16:32])


def test_tenant_salt_is_hmac_prefix() -> None:
    expected = hmac.new(b"secret", b"acme", hashlib.sha256).hexdigest()[:32]
    assert tenant_salt(b"secret", "acme") == expected
    assert tenant_salt(b"secret", "acme") != tenant_salt(b"secret", "globex")
    assert len(expected) == 32


def test_public_blocks_hash_without_salt_and_the_straddling_block_is_private() -> None:
    ids = list(range(48))
    scoped = scoped_chain_hashes(ids, public_tokens=20, salt="t1")
    public = chain_hashes(ids[:16], "")
    assert scoped[0] == public[0]  # block 0 lies wholly in the public 20 tokens
    assert scoped[1] == block_hash(scoped[0], "t1", ids[16:32])  # straddles 20: salted
    other = scoped_chain_hashes(ids, public_tokens=20, salt="t2")
    assert other[0] == scoped[0] and other[1] != scoped[1]


def test_no_public_prefix_equals_plain_salted_chain() -> None:
    ids = list(range(64))
    assert scoped_chain_hashes(ids, 0, "t1") == chain_hashes(ids, "t1")


def test_equal_to_the_engine_scheme() -> None:
    from selfhost.engine.block_hash import chain_hashes as engine_chain_hashes

    for ids, salt in (
        ([], ""),
        (list(range(33)), ""),
        (list(range(100)), "é-tenant"),
        ([2**32 - 1] * 16, "x"),
    ):
        assert chain_hashes(ids, salt) == tuple(engine_chain_hashes(ids, salt))


def test_public_split_equal_to_the_engine_scheme() -> None:
    """The engine's public head (blocks inside `public_tokens` unsalted, the straddling block
    salted) is byte-identical to the gateway's."""
    from selfhost.engine.block_hash import chain_hashes as engine_chain_hashes
    from selfhost.engine.sequence import Sequence

    ids = list(range(100))
    for public in (0, 15, 16, 20, 32, 99, 100, 500):
        expected = scoped_chain_hashes(ids, public, "t1")
        assert tuple(engine_chain_hashes(ids, "t1", public_tokens=public)) == expected
        seq = Sequence("r", list(ids), cache_salt="t1", public_tokens=public)
        assert tuple(seq.block_hashes(16)) == expected
