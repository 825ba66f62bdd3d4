"""IP address parsing and classification for the egress proxy.

Classifies the *resolved* address, after unwrapping IPv4 embedded in IPv6; never trusts
`ipaddress.is_global` alone (Python 3.11 misses NAT64, 6to4 and 192.0.0.0/24 cases).
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# Never reachable, whatever the operator allows: cloud metadata and credential endpoints.
METADATA_ADDRESSES: frozenset[IPAddress] = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254")
)

_DENIED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "this-network"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "ietf-protocol"),
    ("192.0.2.0/24", "documentation"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("198.51.100.0/24", "documentation"),
    ("203.0.113.0/24", "documentation"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "unique-local"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("2001:db8::/32", "documentation"),
)
_EMBEDDING_V4 = (
    ipaddress.ip_network("64:ff9b::/96"),  # NAT64
    ipaddress.ip_network("64:ff9b:1::/48"),  # local-use NAT64
    ipaddress.ip_network("::/96"),  # deprecated IPv4-compatible
)


def parse_ip_literal(host: str) -> IPAddress | None:
    """The address if `host` is an IP literal in any spelling the C library accepts.

    `inet_aton` accepts the legacy forms `ipaddress` rejects but `getaddrinfo` resolves:
    decimal `2130706433`, hex `0x7f000001`, octal `0177.0.0.1`, short `127.1`, `0`.
    """
    name = host.strip()
    if name.startswith("[") and name.endswith("]"):
        name = name[1:-1]
    name = name.split("%", 1)[0]  # IPv6 zone id
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(name.rstrip(".")))
    except (OSError, ValueError):
        return None


def embedded_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address hidden in an IPv6 one (mapped, 6to4, NAT64, compatible)."""
    if not isinstance(ip, ipaddress.IPv6Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    for network in _EMBEDDING_V4:
        if (
            ip in network
            and ip != ipaddress.IPv6Address("::")
            and ip != ipaddress.IPv6Address("::1")
        ):
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def deny_reason(ip: IPAddress, allow_cidrs: Iterable[IPNetwork] = ()) -> str | None:
    """Why `ip` must not be dialled, or None. `allow_cidrs` is the operator's explicit
    exception list (never covering metadata addresses)."""
    if isinstance(ip, ipaddress.IPv6Address) and ip.teredo is not None:
        return "teredo"
    inner = embedded_ipv4(ip)
    if ip in METADATA_ADDRESSES or (inner is not None and inner in METADATA_ADDRESSES):
        return "metadata"
    if inner is not None:
        reason = deny_reason(inner, allow_cidrs)
        return None if reason is None else f"embedded-ipv4:{reason}"
    if any(ip.version == net.version and ip in net for net in allow_cidrs):
        return None
    for cidr, reason in _DENIED:
        network = ipaddress.ip_network(cidr)
        if ip.version == network.version and ip in network:
            return reason
    if not ip.is_global:
        return "not-global"
    return None


def parse_cidrs(values: Iterable[str]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(v, strict=True) for v in values)
