"""The egress proxy in-process over TCP, with a table resolver and a real origin server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from sandbox.addresses import IPAddress, parse_cidrs
from sandbox.egress import EgressPolicy, EgressProxy, SystemResolver, parse_rules
from tests.sandbox.origin import MapResolver, origin_server


async def _ask(proxy_port: int, head: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy_port)
    writer.write(head)
    await writer.drain()
    reply = await asyncio.wait_for(reader.read(), 5)  # until the proxy closes
    writer.close()
    return reply


async def _with_proxy(rules: list[str], resolver: MapResolver, heads: list[bytes]) -> list[bytes]:
    policy = EgressPolicy("t", parse_rules(rules), parse_cidrs(["127.0.0.2/32"]))
    proxy = EgressProxy(policy, resolver, logging.getLogger("lantern.test.egress"))
    server = await proxy.serve_tcp("127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return [await _ask(port, head) for head in heads]
    finally:
        server.close()


def test_connect_to_allowed_name_reaches_the_checked_address() -> None:
    async def scenario() -> list[bytes]:
        async with origin_server() as origin:
            resolver = MapResolver()
            head = (
                f"CONNECT allowed.test:{origin} HTTP/1.1\r\n\r\nGET /x HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            replies = await _with_proxy([f"allowed.test:{origin}"], resolver, [head.encode()])
            assert resolver.asked == ["allowed.test"]
            return replies

    reply = asyncio.run(scenario())[0]
    assert reply.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK")
    assert reply.endswith(b"origin saw GET /x HTTP/1.1 host=a")


def test_plain_http_is_rewritten_to_origin_form() -> None:
    async def scenario() -> bytes:
        async with origin_server() as origin:
            head = (
                f"GET http://allowed.test:{origin}/p?q=1 HTTP/1.1\r\nHost: evil.example\r\n"
                "Proxy-Authorization: x\r\n\r\n"
            ).encode()
            return (await _with_proxy([f"allowed.test:{origin}"], MapResolver(), [head]))[0]

    reply = asyncio.run(scenario())
    assert reply.startswith(b"HTTP/1.1 200 OK")
    assert b"origin saw GET /p?q=1 HTTP/1.1 host=allowed.test:" in reply


@pytest.mark.parametrize(
    ("target", "reason"),
    [
        ("127.0.0.2:{p}", "ip-literal"),
        ("2130706433:{p}", "ip-literal"),
        ("0x7f000002:{p}", "ip-literal"),
        ("0177.0.0.2:{p}", "ip-literal"),
        ("127.2:{p}", "ip-literal"),
        ("0:{p}", "ip-literal"),
        ("[::1]:{p}", "ip-literal"),
        ("[::ffff:127.0.0.2]:{p}", "ip-literal"),
        ("169.254.169.254:80", "ip-literal"),
        ("loopback.test:{p}", "address-loopback"),
        ("private.test:{p}", "address-private"),
        ("metadata.test:{p}", "address-metadata"),
        ("ecs-creds.test:{p}", "address-metadata"),
        ("cgnat.test:{p}", "address-cgnat"),
        ("mapped.test:{p}", "address-embedded-ipv4:loopback"),
        ("mixed.test:{p}", "address-private"),
        ("allowed.test:22", "port-not-allowed"),
        ("evil.test:{p}", "host-not-allowed"),
        ("xallowed.test:{p}", "host-not-allowed"),
        ("allowed.test.evil:{p}", "host-not-allowed"),
        ("\u0430llowed.test:{p}", "host-not-allowed"),  # Cyrillic a: punycode, not ours
    ],
)
def test_connect_refusals(target: str, reason: str, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bytes:
        async with origin_server() as origin:
            rules = [
                f"{name}:{origin}"
                for name in (
                    "allowed.test",
                    "loopback.test",
                    "private.test",
                    "metadata.test",
                    "ecs-creds.test",
                    "cgnat.test",
                    "mapped.test",
                    "mixed.test",
                )
            ]
            head = f"CONNECT {target.format(p=origin)} HTTP/1.1\r\n\r\n".encode()
            return (await _with_proxy(rules, MapResolver(), [head]))[0]

    with caplog.at_level(logging.INFO, logger="lantern.test.egress"):
        reply = asyncio.run(scenario())
    assert reply.startswith(b"HTTP/1.1 403 Forbidden")
    assert reply.endswith(reason.encode())
    decisions = [r.getMessage() for r in caplog.records if r.getMessage().startswith("egress ")]
    assert (
        len(decisions) == 1
        and "decision=deny" in decisions[0]
        and f"reason={reason} " in decisions[0]
    )


@pytest.mark.parametrize(
    "head",
    [
        b"GET http://user@allowed.test/ HTTP/1.1\r\n\r\n",
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"CONNECT allowed.test:443abc HTTP/1.1\r\n\r\n",
        b"CONNECT allowed.test:0 HTTP/1.1\r\n\r\n",
        b"CONNECT allowed.test:65536 HTTP/1.1\r\n\r\n",
        b"GET https://allowed.test/ HTTP/1.1\r\n\r\n",
    ],
)
def test_malformed_requests_are_refused(head: bytes) -> None:
    reply = asyncio.run(_with_proxy(["allowed.test:443"], MapResolver(), [head]))[0]
    assert reply.startswith(b"HTTP/1.1 400 Bad Request")


def test_wildcard_rules_match_strict_subdomains_only() -> None:
    (rule,) = parse_rules(["*.pypi.org:443"])
    assert rule.matches("files.pypi.org", 443)
    assert not rule.matches("pypi.org", 443)
    assert not rule.matches("evilpypi.org", 443)
    assert not rule.matches("files.pypi.org", 80)
    assert parse_rules(["API.Example.com."]) == parse_rules(["api.example.com:443"])
    for bad in ["10.0.0.1:443", "0x7f000001:80", "*evil.com:443", "a.*.com:443", "host:0"]:
        with pytest.raises(ValueError):
            parse_rules([bad])


class FlippingResolver(MapResolver):
    """DNS rebinding: the first answer is the vetted address, every later one is loopback."""

    async def resolve(self, host: str, port: int) -> list[IPAddress]:
        answer = await super().resolve(host, port)
        self._table = {host: ["127.0.0.1"]}
        return answer


def test_rebinding_cannot_swap_the_address_after_the_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> tuple[bytes, list[str], int]:
        async with origin_server() as origin:
            resolver = FlippingResolver()
            head = (
                f"CONNECT allowed.test:{origin} HTTP/1.1\r\n\r\nGET /r HTTP/1.1\r\nHost: a\r\n\r\n"
            )
            replies = await _with_proxy([f"allowed.test:{origin}"], resolver, [head.encode()])
            return replies[0], resolver.asked, origin

    with caplog.at_level(logging.INFO, logger="lantern.test.egress"):
        reply, asked, origin = asyncio.run(scenario())
    assert asked == ["allowed.test"]  # one lookup; the dial used its answer
    assert reply.endswith(b"origin saw GET /r HTTP/1.1 host=a")
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("egress ")]
    assert line == (
        f"egress tool=t decision=allow host=allowed.test port={origin} reason=allowed "
        "address=127.0.0.2"
    )


def test_logs_carry_decisions_never_bodies(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> bytes:
        async with origin_server() as origin:
            head = (
                f"POST http://allowed.test:{origin}/submit HTTP/1.1\r\nContent-Length: 11\r\n"
                "Authorization: Bearer sk-live-SECRET\r\n\r\npassword=42"
            ).encode()
            return (await _with_proxy([f"allowed.test:{origin}"], MapResolver(), [head]))[0]

    with caplog.at_level(logging.DEBUG):
        reply = asyncio.run(scenario())
    assert reply.startswith(b"HTTP/1.1 200 OK")
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "SECRET" not in logged and "password" not in logged and "decision=allow" in logged


@pytest.mark.parametrize(
    ("target", "reason", "logged_host"),
    [
        ("x.test\nFORGED", "malformed-host", "x.test\\nFORGED"),
        ("evil\negress\ttool=t\tdecision=allow", "malformed-host", "evil\\negress\\ttool=t"),
        ("\n127.0.0.1", "ip-literal", "\\n127.0.0.1"),
    ],
)
def test_a_box_cannot_write_lines_into_the_decision_log(
    target: str, reason: str, logged_host: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Control characters in a requested name: refused as malformed, and logged escaped, so
    each decision stays one line and a tool cannot forge `decision=allow` lines."""
    head = f"CONNECT {target}:443 HTTP/1.1\r\n\r\n".encode()
    with caplog.at_level(logging.INFO, logger="lantern.test.egress"):
        reply = asyncio.run(_with_proxy(["*.test:443"], MapResolver(), [head]))[0]
    assert reply.startswith(b"HTTP/1.1 403 Forbidden") and reply.endswith(reason.encode())
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("egress ")]
    assert "\n" not in line and "\t" not in line
    assert line.startswith(f"egress tool=t decision=deny host={logged_host}")


def test_connections_beyond_the_cap_get_429() -> None:
    async def scenario() -> bytes:
        policy = EgressPolicy("t", parse_rules(["allowed.test:443"]))
        proxy = EgressProxy(policy, MapResolver(), logging.getLogger("t"), max_connections=1)
        server = await proxy.serve_tcp("127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, idle = await asyncio.open_connection("127.0.0.1", port)  # holds the only slot
        await asyncio.sleep(0.05)
        reply = await _ask(port, b"CONNECT allowed.test:443 HTTP/1.1\r\n\r\n")
        idle.close()
        server.close()
        return reply

    assert asyncio.run(scenario()).startswith(b"HTTP/1.1 429 Too Many Requests")


def test_the_real_resolver_refuses_a_name_that_resolves_to_loopback() -> None:
    async def scenario() -> bytes:
        async with origin_server() as origin:
            policy = EgressPolicy("t", parse_rules([f"localhost:{origin}"]))
            proxy = EgressProxy(policy, SystemResolver(), logging.getLogger("lantern.test.egress"))
            server = await proxy.serve_tcp("127.0.0.1", 0)
            try:
                head = f"CONNECT localhost:{origin} HTTP/1.1\r\n\r\n".encode()
                return await _ask(server.sockets[0].getsockname()[1], head)
            finally:
                server.close()

    reply = asyncio.run(scenario())
    assert reply.startswith(b"HTTP/1.1 403 Forbidden")
    assert reply.endswith(b"address-loopback")
