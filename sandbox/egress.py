"""The egress proxy: a sandbox's only way out (HTTP CONNECT and plain HTTP).

Allows a host (exact or `*.suffix`) and port from the tool's list, resolves it once, refuses
IP literals and any non-public address, and dials exactly the address it checked. Logs each
decision (never bodies). It must not relay anything it has not decided on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from sandbox.addresses import IPAddress, IPNetwork, deny_reason, parse_ip_literal

MAX_HEAD_BYTES = 64 * 1024
_HOP_HEADERS = {b"proxy-connection", b"proxy-authorization", b"connection", b"keep-alive"}


@dataclass(frozen=True)
class EgressRule:
    host: str  # lower-case ASCII (punycode); a leading "*." matches strict subdomains
    port: int

    def matches(self, host: str, port: int) -> bool:
        if port != self.port:
            return False
        if self.host.startswith("*."):
            return host.endswith(self.host[1:]) and len(host) > len(self.host) - 1
        return host == self.host


@dataclass(frozen=True)
class EgressDecision:
    allowed: bool
    host: str
    port: int
    reason: str
    address: IPAddress | None = None


class Resolver(Protocol):
    async def resolve(self, host: str, port: int) -> list[IPAddress]: ...


class SystemResolver:
    """getaddrinfo in the loop's thread pool, with a timeout."""

    def __init__(self, timeout_s: float = 5.0) -> None:
        self._timeout_s = timeout_s

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        loop = asyncio.get_running_loop()
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), self._timeout_s
        )
        found = [parse_ip_literal(str(info[4][0])) for info in infos]
        return [ip for ip in found if ip is not None]


def normalize_host(host: str) -> str:
    """Lower-case, one trailing dot stripped, IDNA-encoded; ValueError when malformed."""
    name = host.strip().lower()
    name = name[:-1] if name.endswith(".") else name
    if not name or len(name) > 253 or any(not label for label in name.split(".")):
        raise ValueError(f"malformed host {host!r}")
    ascii_name = name.encode("idna").decode("ascii")
    if any(c in "/@:[]% \\" or not c.isprintable() for c in ascii_name):
        raise ValueError(f"malformed host {host!r}")
    return ascii_name


def parse_port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port {text!r}")
    return int(text)


def parse_rules(entries: Sequence[str]) -> tuple[EgressRule, ...]:
    """Policy entries `host[:port]` or `*.suffix[:port]` (port 443 when absent); IP
    literals are refused."""
    rules = []
    for entry in entries:
        host, sep, port = entry.rpartition(":")
        if not sep:
            host, port = entry, "443"
        wildcard = host.startswith("*.")
        name = normalize_host(host[2:] if wildcard else host)
        if "*" in name or parse_ip_literal(name) is not None:
            raise ValueError(f"egress entry {entry!r}: names only, wildcard only as '*.'")
        rules.append(EgressRule(("*." if wildcard else "") + name, parse_port(port)))
    return tuple(rules)


@dataclass(frozen=True)
class EgressPolicy:
    tool: str
    rules: tuple[EgressRule, ...]
    allow_cidrs: tuple[IPNetwork, ...] = ()


class EgressProxy:
    def __init__(
        self,
        policy: EgressPolicy,
        resolver: Resolver,
        logger: logging.Logger,
        connect_timeout_s: float = 10.0,
        idle_timeout_s: float = 300.0,
        max_connections: int = 64,
    ) -> None:
        self._policy = policy
        self._max_connections = max_connections
        self._active = 0
        self._resolver = resolver
        self._log = logger
        self._connect_timeout_s = connect_timeout_s
        self._idle_timeout_s = idle_timeout_s

    async def decide(self, raw_host: str, port: int) -> EgressDecision:
        decision = await self._decide(raw_host, port)
        self._log.info(
            "egress tool=%s decision=%s host=%s port=%d reason=%s address=%s",
            self._policy.tool,
            "allow" if decision.allowed else "deny",
            ascii(decision.host)[1:-1],  # as the box sent it when refused: one line, escaped
            port,
            decision.reason,
            decision.address,
        )
        return decision

    async def _decide(self, raw_host: str, port: int) -> EgressDecision:
        if parse_ip_literal(raw_host) is not None:
            return EgressDecision(False, raw_host, port, "ip-literal")
        try:
            host = normalize_host(raw_host)
        except (ValueError, UnicodeError):
            return EgressDecision(False, raw_host, port, "malformed-host")
        if not any(rule.matches(host, port) for rule in self._policy.rules):
            named = any(rule.matches(host, rule.port) for rule in self._policy.rules)
            return EgressDecision(
                False, host, port, "port-not-allowed" if named else "host-not-allowed"
            )
        try:
            addresses = await self._resolver.resolve(host, port)
        except (OSError, TimeoutError):
            return EgressDecision(False, host, port, "dns-failed")
        if not addresses:
            return EgressDecision(False, host, port, "dns-empty")
        for address in addresses:
            reason = deny_reason(address, self._policy.allow_cidrs)
            if reason is not None:
                return EgressDecision(False, host, port, f"address-{reason}", address)
        return EgressDecision(True, host, port, "allowed", addresses[0])

    async def serve_unix(self, path: str) -> asyncio.base_events.Server:
        return await asyncio.start_unix_server(self.handle, path=path, limit=MAX_HEAD_BYTES)

    async def serve_tcp(self, host: str, port: int) -> asyncio.base_events.Server:
        return await asyncio.start_server(self.handle, host=host, port=port, limit=MAX_HEAD_BYTES)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._active += 1  # one event loop: a plain counter suffices
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self._connect_timeout_s)
            if self._active > self._max_connections:
                await _reply(writer, b"429 Too Many Requests", b"too-many-connections")
            else:
                await self._route(head, reader, writer)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            await _reply(writer, b"400 Bad Request")
        except OSError:
            pass
        finally:
            self._active -= 1
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _route(
        self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        lines = head.split(b"\r\n")
        method, target, version = lines[0].decode("latin-1").split(" ")
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            if not host:
                raise ValueError("CONNECT target needs host:port")
            upstream = await self._open(host, parse_port(port_text), writer)
            if upstream is not None:
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await self._pipe(reader, writer, *upstream)
            return
        url = urlsplit(target)
        if url.scheme != "http" or not url.hostname or url.username is not None:
            raise ValueError("plain HTTP needs an absolute http:// URL without userinfo")
        upstream = await self._open(url.hostname, url.port or 80, writer)
        if upstream is None:
            return
        path = (url.path or "/") + (f"?{url.query}" if url.query else "")
        out = [f"{method} {path} {version}".encode("latin-1"), b"Host: " + url.netloc.encode()]
        for line in lines[1:]:
            name = line.split(b":", 1)[0].strip().lower()
            if line and name not in _HOP_HEADERS and name != b"host":
                out.append(line)
        upstream[1].write(b"\r\n".join([*out, b"Connection: close", b"", b""]))
        await self._pipe(reader, writer, *upstream)

    async def _open(
        self, host: str, port: int, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        decision = await self.decide(host.strip("[]") if host.startswith("[") else host, port)
        if not decision.allowed or decision.address is None:
            await _reply(writer, b"403 Forbidden", decision.reason.encode())
            return None
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(str(decision.address), port), self._connect_timeout_s
            )
        except (OSError, TimeoutError):
            await _reply(writer, b"502 Bad Gateway", b"connect-failed")
            return None

    async def _pipe(
        self,
        client_r: asyncio.StreamReader,
        client_w: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
    ) -> None:
        try:
            await asyncio.gather(self._copy(client_r, up_w), self._copy(up_r, client_w))
        finally:
            up_w.close()

    async def _copy(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while chunk := await asyncio.wait_for(src.read(65536), self._idle_timeout_s):
                dst.write(chunk)
                await dst.drain()
            if dst.can_write_eof():
                dst.write_eof()
        except (OSError, TimeoutError):
            dst.close()


async def _reply(writer: asyncio.StreamWriter, status: bytes, reason: bytes = b"") -> None:
    with contextlib.suppress(OSError):
        writer.write(
            b"HTTP/1.1 "
            + status
            + b"\r\nContent-Type: text/plain\r\nContent-Length: "
            + str(len(reason)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + reason
        )
        await writer.drain()
