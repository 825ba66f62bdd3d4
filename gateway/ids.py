"""Identifiers made on every call, without `uuid.UUID` objects (a few µs each on the hot path).

Same values as the standard library's: `uuid4_hex()` is a random version-4 UUID as
`uuid.uuid4().hex` writes it, `uuid5_str(ns, name)` is `str(uuid.uuid5(ns, name))`.
"""

from __future__ import annotations

import hashlib
import os
import uuid


def uuid4_hex() -> str:
    """A random version-4 UUID (RFC 4122 variant), 32 lowercase hex digits."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def uuid5_str(namespace: uuid.UUID, name: str) -> str:
    """The name-based (SHA-1) UUID of `name` in `namespace`, in its canonical dashed form."""
    raw = bytearray(hashlib.sha1(namespace.bytes + name.encode("utf-8")).digest()[:16])
    raw[6] = (raw[6] & 0x0F) | 0x50
    raw[8] = (raw[8] & 0x3F) | 0x80
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
