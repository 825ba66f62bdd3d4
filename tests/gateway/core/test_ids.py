"""gateway.ids makes the same identifiers as the standard library's uuid module."""

from __future__ import annotations

import os
import uuid
from concurrent.futures import ThreadPoolExecutor

from gateway.ids import uuid4_hex, uuid5_str
from gateway.ledger.call_ledger import ROW_ID_NAMESPACE, usage_row_id


def test_uuid5_str_equals_uuid5() -> None:
    names = [
        "",
        "a",
        "req-1/0",
        "é/ü/中文",
        "x" * 300,
        *(f"{uuid.uuid4().hex}/{i}" for i in range(500)),
    ]
    for name in names:
        assert uuid5_str(ROW_ID_NAMESPACE, name) == str(uuid.uuid5(ROW_ID_NAMESPACE, name))
        assert uuid5_str(uuid.NAMESPACE_DNS, name) == str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def test_row_id_is_uuid5_of_request_and_attempt() -> None:
    assert usage_row_id("abc", 2) == str(uuid.uuid5(ROW_ID_NAMESPACE, "abc/2"))


def test_uuid4_hex_is_a_random_version_4_uuid() -> None:
    seen = {uuid4_hex() for _ in range(2000)}
    assert len(seen) == 2000
    for value in seen:
        parsed = uuid.UUID(hex=value)
        assert parsed.hex == value
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122


def test_uuid4_hex_is_unique_across_threads_and_a_forked_child() -> None:
    """Ids come from a shared pool of random bytes: threads must not be dealt the same bytes,
    and a forked child must not repeat its parent's next ids."""
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda _: [uuid4_hex() for _ in range(2000)], range(8)))
    ids = [value for batch in batches for value in batch]
    assert len(set(ids)) == len(ids) == 16_000
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.close(read)
        os.write(write, "".join(uuid4_hex() for _ in range(4)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read()
    os.waitpid(pid, 0)
    parent = "".join(uuid4_hex() for _ in range(4))
    assert len(child) == len(parent) == 128
    assert child != parent
