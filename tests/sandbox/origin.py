"""A tiny HTTP origin for egress tests, and a resolver that maps test names to addresses."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator

from sandbox.addresses import IPAddress

ORIGIN_HOST = "127.0.0.2"  # the only address the tests' operator allow-list opens
TEST_NAMES = {
    "allowed.test": ["127.0.0.2"],
    "loopback.test": ["127.0.0.1"],
    "private.test": ["10.0.0.5"],
    "metadata.test": ["169.254.169.254"],
    "ecs-creds.test": ["169.254.170.2"],
    "cgnat.test": ["100.64.0.7"],
    "mapped.test": ["::ffff:127.0.0.1"],
    "mixed.test": ["127.0.0.2", "10.0.0.5"],
}


class MapResolver:
    """Answers from a fixed table; records every question (to prove a single lookup)."""

    def __init__(self, table: dict[str, list[str]] | None = None) -> None:
        self._table = table or TEST_NAMES
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        self.asked.append(host)
        if host not in self._table:
            raise OSError(f"no such test name {host}")
        return [ipaddress.ip_address(a) for a in self._table[host]]


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    line = head.split(b"\r\n")[0].decode()
    host = next(
        (
            h.split(b":", 1)[1].strip().decode()
            for h in head.split(b"\r\n")
            if h.lower().startswith(b"host:")
        ),
        "",
    )
    body = f"origin saw {line} host={host}".encode()
    writer.write(
        b"HTTP/1.1 200 OK\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nConnection: close\r\n\r\n"
        + body
    )
    await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def origin_server() -> AsyncIterator[int]:
    server = await asyncio.start_server(_serve, ORIGIN_HOST, 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield port
    finally:
        server.close()
