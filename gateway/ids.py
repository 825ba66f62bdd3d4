"""Identifiers made on every call, without `uuid.UUID` objects (a few µs each on the hot path).

Same values as the standard library's: `uuid4_hex()` is a random version-4 UUID as
`uuid.uuid4().hex` writes it, `uuid5_str(ns, name)` is `str(uuid.uuid5(ns, name))`.
"""

from __future__ import annotations

import hashlib
import os
import uuid

# the RFC 4122 variant over a hex digit: its two high bits become 10
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


def uuid4_hex() -> str:
    """A random version-4 UUID (RFC 4122 variant), 32 lowercase hex digits."""
    raw = bytearray(os.urandom(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    return raw.hex()


def uuid5_namespace(namespace: uuid.UUID) -> hashlib._Hash:
    """The SHA-1 state after `namespace`: hashed once, copied for each name (`uuid5_in`)."""
    return hashlib.sha1(namespace.bytes)


def uuid5_in(namespace: hashlib._Hash, name: str) -> str:
    """The name-based (SHA-1) UUID of `name` in `namespace` (`uuid5_namespace`), dashed."""
    digest = namespace.copy()
    digest.update(name.encode("utf-8"))
    h = digest.hexdigest()
    # version 5 in the 13th digit, the variant in the 17th
    return f"{h[:8]}-{h[8:12]}-5{h[13:16]}-{_VARIANT[h[16]]}{h[17:20]}-{h[20:32]}"


def uuid5_str(namespace: uuid.UUID, name: str) -> str:
    """The name-based (SHA-1) UUID of `name` in `namespace`, in its canonical dashed form."""
    return uuid5_in(uuid5_namespace(namespace), name)
