"""Identifiers made on every call, without `uuid.UUID` objects (a few µs each on the hot path).

Same values as the standard library's: `uuid4_hex()` is a random version-4 UUID as
`uuid.uuid4().hex` writes it, `uuid5_str(ns, name)` is `str(uuid.uuid5(ns, name))`.
"""

from __future__ import annotations

import hashlib
import os
import threading
import uuid

# the RFC 4122 variant over a hex digit: its two high bits become 10
_VARIANT = {digit: "89ab"[int(digit, 16) & 3] for digit in "0123456789abcdef"}


class _RandomBytes:
    """The kernel's random bytes read 4 KiB at a time (a getrandom(2) per id cost a system call,
    ~5 µs on a cold path, twice a call), dealt out once each, under a lock (ids are also made in
    worker threads); a forked child starts on bytes of its own."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a lock held at fork time stays held in the child
        self._pool, self._at = b"", 0

    def take(self, n: int) -> bytes:
        with self._lock:
            at = self._at
            if at + n > len(self._pool):
                self._pool, at = os.urandom(self._size), 0
            self._at = at + n
            return self._pool[at : at + n]


_RANDOM = _RandomBytes()


def uuid4_hex() -> str:
    """A random version-4 UUID (RFC 4122 variant), 32 lowercase hex digits."""
    raw = bytearray(_RANDOM.take(16))
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
